package dev.tpcomm.engine

import dev.tpcomm.InternalTpcommApi

import kotlinx.coroutines.CancellableContinuation
import kotlinx.coroutines.CoroutineDispatcher
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.cancel
import kotlinx.coroutines.suspendCancellableCoroutine
import kotlinx.coroutines.withContext
import java.util.ArrayDeque
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.atomic.AtomicInteger
import java.util.concurrent.locks.LockSupport
import kotlin.coroutines.CoroutineContext
import kotlin.coroutines.EmptyCoroutineContext
import kotlin.coroutines.resume
import kotlin.coroutines.resumeWithException

/**
 * One dedicated platform thread for a native communicator (MPI, NCCL, RCCL): it runs the
 * coroutines dispatched to it in FIFO order and, between them, drives a progress loop over the
 * in-flight [NativeRequest]s, resuming each waiting coroutine when its request completes.
 *
 * **Ordering.** Work dispatched from one thread runs in the order it was dispatched, so
 * `withContext(dispatcher) { startNonBlockingCall() }` issues native calls in program order.
 * Every native call of a communicator should go through its dispatcher: the thread is the only
 * one that touches the native handles, which is what libraries initialised below
 * `MPI_THREAD_MULTIPLE` require.
 *
 * **Progress loop.** While requests are in flight the thread polls them; when a pass makes no
 * progress it spins ([spinIterations] passes), then yields, then parks with an exponential backoff
 * from 1 µs up to [maxParkNanos], re-polling after every wake-up. With nothing in flight it parks
 * until work is dispatched. It never sleeps a fixed interval per poll.
 *
 * **No hop.** Callers already on the thread ([isNativeThread]) run [execute] inline and [await]
 * polls once inline, returning without suspending when the request has already completed (the
 * small-message fast path). A caller on another thread may run a blocking block on its own thread
 * with [runHereIfIdle], when the dispatcher has nothing queued, nothing in flight and nothing
 * running: the block then owns the native library exactly as the dispatcher's thread would (the
 * thread is kept out until the block returns), with no thread hop, which is what the library needs
 * for calls that are legal from any thread but must not overlap (`MPI_THREAD_MULTIPLE`, one
 * communicator).
 *
 * **Thread-safety.** [dispatch], [execute], [await] and [close] may be called from any thread.
 * [NativeRequest.poll] and the blocks given to [execute] run on the dispatcher's thread only.
 *
 * **Cancellation.** Cancelling a coroutine suspended in [await] resumes it at once with
 * `CancellationException`, but the request stays in the progress loop until it completes, fails or
 * the dispatcher closes, because the native library may still use the memory it references.
 *
 * **Shutdown.** [close] lets already-queued work run, fails every pending [await] with
 * [NativeDispatcherClosedException], and ends the thread. Work dispatched afterwards is cancelled
 * and runs on `Dispatchers.IO` so that its coroutine can complete exceptionally.
 */
@InternalTpcommApi
public class NativeDispatcher @JvmOverloads constructor(
    /** Name of the thread (shown in thread dumps). */
    public val name: String,
    /** Passes over the in-flight requests without progress before the thread starts yielding. */
    public val spinIterations: Int = 2_000,
    /** Longest park between polls while requests are in flight, in nanoseconds. */
    public val maxParkNanos: Long = 200_000,
    /**
     * How long the thread stays awake after its last task before it parks, in nanoseconds (0: it
     * parks at once). While awake it takes dispatched work without being unparked (a spinning
     * hand-off), but [runHereIfIdle] finds it busy, so callers hand their calls over.
     */
    public val idleSpinNanos: Long = 0,
) : CoroutineDispatcher(), AutoCloseable {
    private class Waiter(val request: NativeRequest, @Volatile var continuation: CancellableContinuation<Unit>?)

    private val queue = ConcurrentLinkedQueue<Runnable>()
    private val inFlight = ArrayDeque<Waiter>() // touched on the native thread only

    @Volatile private var parked = false

    @Volatile private var closed = false

    /**
     * Who may touch the native library now: [LOOP] (the dispatcher's thread, whenever it is awake or
     * polls requests), [FREE] (the thread is parked with nothing in flight) or [CALLER] (a
     * [runHereIfIdle] block on another thread).
     */
    private val owner = AtomicInteger(LOOP)

    /** The thread running a [runHereIfIdle] block, while it runs. */
    @Volatile private var callerThread: Thread? = null

    /** True while the dispatcher's thread waits for a [runHereIfIdle] block to end. */
    @Volatile private var loopWaiting = false

    private val thread: Thread = Thread.ofPlatform().name(name).daemon(true).unstarted(::loop)

    init {
        require(spinIterations >= 0) { "spinIterations must be >= 0, got $spinIterations" }
        require(maxParkNanos >= 1_000) { "maxParkNanos must be >= 1000, got $maxParkNanos" }
        require(idleSpinNanos >= 0) { "idleSpinNanos must be >= 0, got $idleSpinNanos" }
        thread.start()
    }

    /** True when the calling thread is this dispatcher's thread. */
    public val isNativeThread: Boolean get() = Thread.currentThread() === thread

    /**
     * Runs [block] on the calling thread, with no hop, if the dispatcher is idle (nothing queued,
     * no request in flight, its thread parked) and not closed, and returns true; otherwise runs
     * nothing and returns false (then dispatch as usual). While [block] runs, the dispatcher's
     * thread does not run queued work or poll requests: work dispatched meanwhile runs after
     * [block] returns, so the block and the thread never call the native library at the same time,
     * and the order of calls is kept (work dispatched before this call makes it return false).
     * [block] must not suspend or call [execute]/[await]; its exceptions propagate after the
     * dispatcher is released. Thread-safe. Called on the dispatcher's own thread it returns false.
     */
    public fun runHereIfIdle(block: () -> Unit): Boolean {
        if (closed || Thread.currentThread() === thread) return false
        var wait: Backoff? = null
        while (true) {
            if (!queue.isEmpty()) return false
            if (owner.compareAndSet(FREE, CALLER)) break
            // Not free, but nothing queued or in flight: the thread is finishing its last task (it
            // resumed a caller, then frees the library right before it parks). That caller comes back
            // about then; handing over would find the thread in the same state after every call, so
            // wait briefly instead (a thread busy with a long task costs this wait, then a hand-off).
            // The dispatcher's wait policy, spin then yield (where cores are scarce the thread needs
            // this core to finish), but a wait that would park gives up instead.
            if (inFlightSize != 0) return false
            val backoff = wait ?: Backoff(FINISHING_SPINS, FINISHING_YIELDS, maxParkNanos).also { wait = it }
            when (backoff.advance()) {
                Backoff.SPIN -> Thread.onSpinWait()
                Backoff.YIELD -> Thread.yield()
                else -> return false
            }
        }
        try {
            // Work dispatched between the check and the claim was called first: it goes first.
            if (closed || !queue.isEmpty()) return false
            callerThread = Thread.currentThread()
            try {
                block()
            } finally {
                callerThread = null
            }
            return true
        } finally {
            owner.set(FREE)
            if (loopWaiting || !queue.isEmpty()) LockSupport.unpark(thread)
        }
    }

    /**
     * Runs [block] on the dispatcher's thread, after the work dispatched before it, and returns its
     * result, waiting for it on the caller's thread (spinning briefly, then yielding) for up to
     * [spinNanos] before suspending: the caller of a short block is never parked and woken. Called
     * on the dispatcher's thread it runs [block] inline.
     *
     * **Cancellation.** A caller cancelled while [block] is still queued is resumed with the
     * `CancellationException` and [block] never starts; one cancelled while [block] runs is resumed
     * at once, and [block] runs to its end without anyone waiting for its result. While it spins,
     * the caller notices a cancellation only when it suspends (after at most [spinNanos]).
     *
     * @throws NativeDispatcherClosedException when the dispatcher is closed.
     */
    public suspend fun <T> handOff(spinNanos: Long, block: () -> T): T {
        if (isNativeThread) return block()
        if (closed) throw NativeDispatcherClosedException.closed(name)
        val task = SpinningTask(block)
        dispatch(EmptyCoroutineContext, task)
        if (task.awaitSpinning(spinNanos)) return task.result()
        return suspendCancellableCoroutine { cont -> task.attach(cont) }
    }

    /** True while a [runHereIfIdle] block runs on the calling thread. */
    public val isRunningHere: Boolean get() = callerThread === Thread.currentThread()

    /** True once [close] was called. */
    public val isClosed: Boolean get() = closed

    override fun isDispatchNeeded(context: CoroutineContext): Boolean = Thread.currentThread() !== thread

    override fun dispatch(context: CoroutineContext, block: Runnable) {
        if (closed) {
            context.cancel(NativeDispatcherClosedException.closed(name).asCancellation())
            Dispatchers.IO.dispatch(context, block)
            return
        }
        queue.add(block)
        if (parked) LockSupport.unpark(thread)
    }

    /**
     * Runs [block] on the dispatcher's thread, after the work dispatched before it, and returns its
     * result; inline when already on that thread. Exceptions thrown by [block] propagate.
     *
     * @throws NativeDispatcherClosedException when the dispatcher is closed.
     */
    public suspend fun <T> execute(block: () -> T): T {
        if (closed) throw NativeDispatcherClosedException.closed(name)
        return if (isNativeThread) block() else withContext(this) { block() }
    }

    /**
     * Suspends until [request] completes, polling it on the dispatcher's thread; called from that
     * thread, the first poll is inline and a completed request returns without suspending.
     * If [NativeRequest.poll] throws, so does this function.
     *
     * @throws NativeDispatcherClosedException when the dispatcher closes first.
     */
    public suspend fun await(request: NativeRequest) {
        if (closed) throw NativeDispatcherClosedException.closed(name)
        if (!isNativeThread) return withContext(this) { await(request) }
        if (request.poll()) return
        suspendCancellableCoroutine { cont ->
            val waiter = Waiter(request, cont)
            inFlight.addLast(waiter)
            cont.invokeOnCancellation { waiter.continuation = null }
        }
    }

    /** Number of requests the progress loop polls right now (for diagnostics and tests). */
    public val inFlightCount: Int get() = inFlightSize

    @Volatile private var inFlightSize = 0

    /**
     * Closes the dispatcher: already queued work runs, pending [await]s fail with
     * [NativeDispatcherClosedException], and the thread ends. Waits for the thread to end unless
     * called from it. Idempotent.
     */
    override fun close() {
        if (closed) return
        closed = true
        LockSupport.unpark(thread)
        if (!isNativeThread) thread.join()
    }

    override fun toString(): String = "NativeDispatcher($name)"

    private fun loop() {
        val backoff = Backoff(spinIterations, yieldIterations = 16, maxParkNanos)
        while (true) {
            var progressed = runQueued()
            if (pollInFlight()) progressed = true
            if (closed) {
                runQueued()
                break
            }
            if (inFlight.isEmpty()) {
                if (!queue.isEmpty()) continue
                if (idleSpinNanos > 0 && awaitWorkSpinning()) continue
                // Idle: a caller may run a block on its own thread (runHereIfIdle) until we wake. Freed
                // at once after the last task, which may have resumed the caller that comes next.
                owner.set(FREE)
                park(0)
                claim()
                backoff.reset()
            } else if (progressed) {
                backoff.reset()
            } else {
                backoff.idle { park(it) }
            }
        }
        val error = NativeDispatcherClosedException.closed(name)
        while (inFlight.isNotEmpty()) inFlight.pollFirst()?.continuation?.resumeWithException(error)
        inFlightSize = 0
    }

    /**
     * Stays awake for up to [idleSpinNanos] waiting for work: spins briefly, then yields (where a
     * caller shares this core, it needs the core to dispatch). True when work arrived or the
     * dispatcher closed.
     */
    private fun awaitWorkSpinning(): Boolean {
        val end = System.nanoTime() + idleSpinNanos
        var spins = 0
        while (queue.isEmpty() && !closed) {
            if (spins < IDLE_SPINS) { spins++; Thread.onSpinWait(); continue }
            if (System.nanoTime() - end >= 0) return false
            Thread.yield()
        }
        return true
    }

    /** Takes the library back from a [runHereIfIdle] block (waits for it to end). */
    private fun claim() {
        while (!owner.compareAndSet(FREE, LOOP)) {
            loopWaiting = true
            if (owner.get() != FREE) LockSupport.park(this)
            loopWaiting = false
        }
    }

    private fun runQueued(): Boolean {
        var ran = false
        while (true) {
            val task = queue.poll() ?: return ran
            ran = true
            try {
                task.run()
            } catch (t: Throwable) {
                // A dispatched task never throws unless the coroutine machinery itself failed: report and go on.
                thread.uncaughtExceptionHandler?.uncaughtException(thread, t)
            }
        }
    }

    private fun pollInFlight(): Boolean {
        var progressed = false
        var n = inFlight.size
        while (n-- > 0) {
            val waiter = inFlight.pollFirst() ?: break
            val done = try {
                waiter.request.poll()
            } catch (t: Throwable) {
                progressed = true
                waiter.continuation?.resumeWithException(t)
                continue
            }
            if (done) {
                progressed = true
                waiter.continuation?.resume(Unit)
            } else {
                inFlight.addLast(waiter)
            }
        }
        inFlightSize = inFlight.size
        return progressed
    }

    private fun park(nanos: Long) {
        parked = true
        try {
            if (queue.isEmpty() && !closed) {
                if (nanos == 0L) LockSupport.park(this) else LockSupport.parkNanos(this, nanos)
            }
        } finally {
            parked = false
        }
    }
}

/**
 * How long [NativeDispatcher.runHereIfIdle] waits for a thread that is only finishing up (it has no
 * task and nothing in flight; it needs well under 1 µs when it has a core): [FINISHING_SPINS] polls
 * with `onSpinWait`, then [FINISHING_YIELDS] with `Thread.yield` (a [Backoff]), which lets the thread
 * run where the caller holds the only free core (2 ranks of 2 threads each on 2 cores).
 */
private const val FINISHING_SPINS = 200
private const val FINISHING_YIELDS = 200

/** Polls with `onSpinWait` before an idle thread that stays awake ([NativeDispatcher.idleSpinNanos]) starts yielding. */
private const val IDLE_SPINS = 200

private const val FREE = 0
private const val LOOP = 1
private const val CALLER = 2

private fun NativeDispatcherClosedException.asCancellation(): kotlinx.coroutines.CancellationException =
    kotlinx.coroutines.CancellationException(message, this)

internal fun NativeDispatcherClosedException.Companion.closed(name: String): NativeDispatcherClosedException =
    NativeDispatcherClosedException("native dispatcher '$name' is closed; create a new communicator")

/**
 * A block handed to a [NativeDispatcher] whose caller spins for the result before it suspends
 * ([NativeDispatcher.handOff]). [state] is null while neither side finished, the
 * [CancellableContinuation] once the caller suspended, or the block's [Result] once it ran.
 */
private class SpinningTask<T>(private val block: () -> T) : Runnable {
    private val state = java.util.concurrent.atomic.AtomicReference<Any?>(null)

    override fun run() {
        val before = state.get()
        // A caller cancelled while the block was queued: it must not start.
        if (before is CancellableContinuation<*> && !before.isActive) return
        val result = runCatching(block)
        while (true) {
            val s = state.get()
            if (s is CancellableContinuation<*>) {
                @Suppress("UNCHECKED_CAST")
                (s as CancellableContinuation<T>).resumeWith(result)
                return
            }
            if (state.compareAndSet(null, result)) return
        }
    }

    /** Waits up to [spinNanos] for the result; true when it is there. */
    fun awaitSpinning(spinNanos: Long): Boolean = Backoff.spinFor(spinNanos) { state.get() is Result<*> }

    @Suppress("UNCHECKED_CAST")
    fun result(): T = (state.get() as Result<T>).getOrThrow()

    /** Suspends [cont] until the block ran (resumes it at once if it already did). */
    fun attach(cont: CancellableContinuation<T>) {
        if (!state.compareAndSet(null, cont)) {
            @Suppress("UNCHECKED_CAST")
            cont.resumeWith(state.get() as Result<T>)
        }
    }
}
