package dev.tpcomm.mpi

import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.engine.AbortEscalation
import dev.tpcomm.engine.Backoff
import dev.tpcomm.engine.NativeDispatcher
import java.lang.foreign.Arena
import java.lang.foreign.ValueLayout
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger
import kotlin.coroutines.EmptyCoroutineContext
import kotlin.time.Duration.Companion.nanoseconds

/**
 * MPI's process-wide state: the library, `MPI_Init_thread` once, `MPI_Finalize` once (when the
 * last communicator closes or at JVM shutdown), and the live communicators ([MpiCommunicators]:
 * their peers' abort notices). Every method is thread-safe and idempotent where the name says so.
 *
 * MPI cannot be initialised again after `MPI_Finalize`: a communicator created after the last
 * one closed fails with a clear [IllegalStateException].
 */
internal class MpiRuntime(
    val library: MpiLibrary,
    val binding: MpiBinding,
    /** Thread level MPI provided. */
    val providedThreadLevel: Int,
    /** Whether this runtime called `MPI_Init_thread` (and so must finalize). */
    private val ownsInit: Boolean,
    /** CUDA support reported by `MPIX_Query_cuda_support` (-1: the library has no such function). */
    val cudaSupport: Int,
    /** The thread that called `MPI_Init_thread`, when below `MPI_THREAD_MULTIPLE` (every MPI call then runs on it). */
    mpiThread: NativeDispatcher? = null,
) {
    private val users = AtomicInteger(0)
    private val lock = Any()

    @Volatile var finalized: Boolean = false
        private set

    /** Operations in flight across all communicators; finalize waits for none. */
    val inFlight: AtomicInteger = AtomicInteger(0)

    /** Set when a communicator broke (timeout, mismatch, cancellation): finalize would hang, so it is skipped. */
    @Volatile var broken: Boolean = false

    val communicators: MpiCommunicators = MpiCommunicators()

    /**
     * Below `MPI_THREAD_MULTIPLE` only one thread may be inside MPI at a time: every communicator
     * of the process then shares this one thread (created with the first, closed with MPI).
     */
    private var sharedDispatcher: NativeDispatcher? = mpiThread

    /** Whether communicators share one MPI thread ([providedThreadLevel] below `MPI_THREAD_MULTIPLE`). */
    val sharesOneThread: Boolean get() = providedThreadLevel < MpiThreadLevel.Multiple.value

    /**
     * Whether any thread may call MPI (`MPI_THREAD_MULTIPLE` was provided): then the notice thread tests
     * peers' abort notices and a failing thread sends its own, while communicators' threads are
     * blocked in collectives.
     */
    val multiThreaded: Boolean get() = providedThreadLevel >= MpiThreadLevel.Multiple.value

    /**
     * The thread a new communicator runs its MPI calls on, and whether the communicator owns it
     * (closes it when it closes): its own thread under `MPI_THREAD_MULTIPLE`, otherwise the
     * process's one MPI thread.
     */
    fun dispatcherFor(name: String): Pair<NativeDispatcher, Boolean> {
        if (!sharesOneThread) return NativeDispatcher("tpcomm-mpi-$name", idleSpinNanos = HANDOFF_SPIN_NANOS) to true
        synchronized(lock) {
            val d = sharedDispatcher ?: NativeDispatcher("tpcomm-mpi").also { sharedDispatcher = it }
            return d to false
        }
    }

    private val pinned = java.util.concurrent.ConcurrentLinkedQueue<Any>()

    /** Keeps [obj] (buffers MPI may still touch) reachable for the life of the process. */
    fun pin(obj: Any?) {
        if (obj != null) pinned += obj
    }

    val implementation: MpiImplementation get() = library.implementation

    /** Registers one more communicator. @throws IllegalStateException after finalize. */
    fun retain() {
        synchronized(lock) {
            check(!finalized) {
                "MPI was finalized when the last MPI communicator closed, and MPI cannot be initialised twice in one process; " +
                    "keep a communicator open for as long as the program uses MPI"
            }
            users.incrementAndGet()
        }
    }

    /** Unregisters a communicator; the last one finalizes MPI (unless a communicator broke). */
    fun release() {
        val last = synchronized(lock) { users.decrementAndGet() == 0 }
        if (last) {
            finalizeOnce()
            synchronized(lock) { sharedDispatcher }?.close()
        }
    }

    /**
     * The longest [dev.tpcomm.CommConfig.timeout] of the communicators created in this process:
     * how long `MPI_Finalize` may wait for the other ranks to finish (nanoseconds).
     */
    @Volatile var finalizeTimeoutNanos: Long = 0L
        private set

    /**
     * The world [MpiStoreWorld] formed from singletons (no `mpirun`: each process's
     * `MPI_COMM_WORLD` holds only itself), or 0. Set once, before the world's communicator is made.
     */
    @Volatile var formedWorld: Long = 0L

    /** The job's world: [formedWorld] when MPI formed it from the store, else `MPI_COMM_WORLD`. */
    val worldComm: Long get() = formedWorld.takeIf { it != 0L } ?: binding.abi.commWorld

    /** This process's rank in `MPI_COMM_WORLD` (for messages), once a world communicator exists; -1 before. */
    @Volatile var worldRank: Int = -1

    /** Raises [finalizeTimeoutNanos] to [timeoutNanos] when it is longer. */
    fun noteTimeout(timeoutNanos: Long) {
        synchronized(lock) { if (timeoutNanos > finalizeTimeoutNanos) finalizeTimeoutNanos = timeoutNanos }
    }

    /**
     * `MPI_Finalize` once, when this runtime initialised MPI. Idempotent. Runs on the MPI thread
     * when communicators share one (inline when called there), else on a helper thread.
     *
     * `MPI_Finalize` waits for every rank of the job to finalize (Open MPI's `ompi_mpi_finalize`
     * and MPICH's `MPII_Finalize` end in a PMI fence/barrier), so a rank that finished early waits
     * here for its peers. It waits as long as the longest communicator timeout
     * ([finalizeTimeoutNanos]) plus [FINALIZE_MARGIN_NANOS]: healthy peers that are still working within that time are never
     * killed. Past it the job is failing (a peer stalled, died, or works longer than the timeout
     * allows): unless a communicator of this process was aborted earlier (then MPI may never
     * finalize, and the process leaves it unfinalized with the program's own exit status), the rank
     * says so and ends itself with exit code [MpiBackend.ABORT_CODE]
     * (`MPI_Abort` is not allowed once `MPI_Finalize` started), which makes the launcher end the
     * other ranks: never exit 0.
     */
    fun finalizeOnce() {
        if (finalized) return
        // The peers' own deadlines come first: a peer blocked in a collective this rank left
        // reports it (naming the operation) at the timeout; this rank gives up a margin later.
        val full = (finalizeTimeoutNanos.takeIf { it > 0 } ?: DEFAULT_FINALIZE_WAIT_NANOS) + FINALIZE_MARGIN_NANOS
        // After an aborted communicator MPI may never finalize (see below): wait no longer than
        // the 10 s this backend always allowed then, so such a job still ends promptly.
        val waitNanos = if (broken) minOf(full, AFTER_ABORT_FINALIZE_WAIT_NANOS) else full
        val started = System.nanoTime()
        // Issue 32 finding 5: a communicator's thread may still be inside a blocking call its caller
        // gave up on (withTimeout, awaitAll(timeout)), with its abort notices queued behind it.
        // MPI_Finalize while it is inside MPI, or a notice sent after MPI_Finalize, crashed MPICH's
        // transport (ucp_tag_send_nbx); and a notice not sent leaves the peers' next call waiting.
        // So every communicator's thread first finishes what it has (outside the lock: a close()
        // queued there takes it), within the finalize wait.
        val drained = communicators.drain(started + waitNanos)
        synchronized(lock) {
            if (finalized) return
            finalized = true
            communicators.close()
            closeGate()
            if (!ownsInit) return
            if (!drained) {
                System.err.println(
                    "tpcomm-mpi: rank $worldRank: a communicator's thread is still inside an MPI call after ${waitNanos.nanoseconds} " +
                        "(an operation its caller gave up on, which a peer never joined); exiting without MPI_Finalize, which must not " +
                        "run while another thread is inside MPI",
                )
                return
            }
            val finalize = Runnable {
                Arena.ofConfined().use { a ->
                    val flag = a.allocate(ValueLayout.JAVA_INT)
                    binding.finalized(flag.address())
                    if (flag.get(ValueLayout.JAVA_INT, 0) == 0) {
                        // A rank ended by the deadline (halt) never enters MPI_Finalize.
                        if (broken || awaitEveryRank(a)) binding.finalize()
                    }
                }
            }
            val shared = sharedDispatcher?.takeIf { !it.isClosed }
            if (shared != null && shared.isNativeThread) {
                finalize.run()
                return
            }
            val done = CountDownLatch(1)
            val task = Runnable { try { finalize.run() } finally { done.countDown() } }
            if (shared != null) {
                shared.dispatch(EmptyCoroutineContext, task)
            } else {
                Thread.ofPlatform().daemon(true).name("tpcomm-mpi-finalize").start(task)
            }
            // Waits for MPI_Finalize: up to waitNanos while a peer may still be working, and at most
            // AFTER_BARRIER_FINALIZE_WAIT_NANOS once every rank is known to have arrived.
            var finished = false
            while (true) {
                if (done.await(50, TimeUnit.MILLISECONDS)) { finished = true; break }
                val now = System.nanoTime()
                val arrived = everyRankArrivedAt
                if (arrived != 0L && now - arrived > AFTER_BARRIER_FINALIZE_WAIT_NANOS) break
                if (arrived == 0L && now - started > waitNanos) break
            }
            if (!finished && everyRankArrivedAt != 0L) {
                // Every rank of the job reached MPI_Finalize (the barrier above completed), so no
                // work is left anywhere; MPI_Finalize itself did not return. Seen with MPICH 4.0.2 and
                // UCX 1.13 across hosts (a rank spins in its endpoint disconnects while the others
                // wait in the PMI barrier; docs/mpi.md, "Across hosts"). Leave MPI unfinalized and let
                // the process end with the program's own status instead of failing a finished job.
                System.err.println(
                    "tpcomm-mpi: rank $worldRank: every rank reached MPI_Finalize, but MPI_Finalize did not return within " +
                        "${AFTER_BARRIER_FINALIZE_WAIT_NANOS.nanoseconds} (a known MPICH 4.0 / UCX finalize hang, docs/mpi.md); " +
                        "exiting without MPI_Finalize, with the program's own status",
                )
                return
            }
            if (!finished && broken) {
                // A communicator of this process was aborted earlier and the program was told (it
                // caught the exception, e.g. on a duplicate with abortOnTimeout = false): MPI may
                // never finish that communicator's abandoned operations, so MPI_Finalize may never
                // return (seen with MPICH over TCP between hosts). Leave MPI unfinalized and let the
                // process exit with the program's own status.
                System.err.println(
                    "tpcomm-mpi: rank $worldRank: MPI_Finalize did not complete within ${waitNanos.nanoseconds}: a communicator of this " +
                        "process was aborted earlier and MPI may never finish its abandoned operations; exiting without MPI_Finalize",
                )
                return
            }
            if (!finished) {
                System.err.println(
                    "tpcomm-mpi: rank $worldRank: MPI_Finalize did not complete within ${waitNanos.nanoseconds} (the communicator timeout plus ${FINALIZE_MARGIN_NANOS.nanoseconds}): " +
                        "another rank of the job has not finished (it stalled, died, or works longer than the timeout allows); " +
                        "ending this process with exit code ${MpiBackend.ABORT_CODE}, which ends the job",
                )
                // MPI_Abort is not allowed once MPI_Finalize started (MPICH 4.0 answers "Invalid
                // communicator" and exits 5): end the process; the launcher ends the other ranks.
                haltNow(MpiBackend.ABORT_CODE, "MPI_Finalize timed out")
            }
        }
    }

    /** Held (read) while a call of [whileMpiOpen] runs; [closeGate] takes it (write) once, before `MPI_Finalize`. */
    private val gate = java.util.concurrent.locks.ReentrantReadWriteLock()

    /** Set by [closeGate]: MPI is being finalized; [whileMpiOpen] runs nothing more. */
    @Volatile private var gateClosed = false

    /**
     * Runs [block] (MPI calls made outside any operation of the program, such as the abort notices
     * a communicator's thread sends after its call returned) unless `MPI_Finalize` began, which
     * waits for it meanwhile: true when it ran. Issue 32 finding 5: a notice sent after
     * `MPI_Finalize` crashed the JVM inside MPICH's transport (`ucp_tag_send_nbx`).
     */
    fun whileMpiOpen(block: () -> Unit): Boolean {
        val read = gate.readLock()
        read.lock()
        try {
            if (gateClosed) return false
            block()
            return true
        } finally {
            read.unlock()
        }
    }

    /**
     * Before `MPI_Finalize`: waits (at most [GATE_WAIT_MILLIS]) for the [whileMpiOpen] calls
     * running, and lets no other start.
     */
    private fun closeGate() {
        val write = gate.writeLock()
        val got = try {
            write.tryLock(GATE_WAIT_MILLIS, TimeUnit.MILLISECONDS)
        } catch (_: InterruptedException) {
            false
        }
        gateClosed = true
        if (got) write.unlock()
    }

    /** When the barrier before `MPI_Finalize` completed ([awaitEveryRank]): every rank had reached it. 0 before. */
    @Volatile private var everyRankArrivedAt: Long = 0L

    /**
     * `MPI_Ibarrier` on the job's world ([worldComm]), tested until every rank of the job has reached finalize
     * (then [everyRankArrivedAt] is set). Without it a rank stuck inside `MPI_Finalize` cannot tell
     * a peer that is still working (wait for it) from a finalize that will never return (do not).
     * Returns true when the barrier completed or MPI refused it (then `MPI_Finalize` decides), false
     * once the caller's deadline ended the process ([halted]): a barrier that never completes.
     */
    private fun awaitEveryRank(a: Arena): Boolean {
        val abi = binding.abi
        val request = a.allocate(16, 8)
        val flag = a.allocate(ValueLayout.JAVA_INT)
        if (binding.ibarrier(worldComm, request.address()) != 0) return true
        // The peers may still work for minutes: the one wait policy, parking up to 1 ms between tests.
        val backoff = Backoff(spinIterations = 100, yieldIterations = 100, maxParkNanos = 1_000_000)
        while (!halted) {
            if (binding.test(request.address(), flag.address(), abi.statusIgnore) != 0) return true
            if (flag.get(ValueLayout.JAVA_INT, 0) != 0) {
                everyRankArrivedAt = System.nanoTime()
                return true
            }
            backoff.idle()
        }
        return false
    }

    /**
     * The JVM is shutting down (`main` returned, `System.exit`, or a signal such as the launcher's
     * SIGTERM after a peer died). With an operation still in progress this rank cannot finish it
     * and `MPI_Finalize` would wait for it: say so, naming the operation, and end the process with
     * exit code [MpiBackend.ABORT_CODE]. A signal (SIGINT, SIGTERM, SIGHUP:
     * [MpiProgramFailure.signalStatus]) between operations ends the job the same way a failed program
     * does ([programFailed]: the peers are told, then `MPI_Abort`): the program was interrupted, its
     * peers may be waiting for it in a collective, and `MPI_Finalize` would hold them until their
     * timeout (issue 32 finding 6). Otherwise finalize ([finalizeOnce]).
     */
    fun onShutdown() {
        val status = MpiProgramFailure.exitStatus
        if (status != 0 && !finalized) {
            // System.exit(N) with N != 0: the program failed. Waiting in the barrier before
            // MPI_Finalize would hold the job until the other ranks' timeout; end it now.
            programFailed("it called System.exit($status)", status)
            return
        }
        val busy = if (finalized) emptyList() else communicators.activeCalls()
        if (busy.isNotEmpty()) {
            System.err.println(
                "tpcomm-mpi: rank $worldRank: dev.tpcomm.CommunicatorAbortedException: the process is shutting down (System.exit, or a " +
                    "signal from the launcher after another rank failed) while ${busy.joinToString()} is in progress; " +
                    "ending with exit code ${MpiBackend.ABORT_CODE}",
            )
            haltNow(MpiBackend.ABORT_CODE, "shut down during an MPI operation")
            return
        }
        val signal = MpiProgramFailure.signalStatus
        if (signal != 0 && !finalized) {
            val name = when (signal - 128) {
                1 -> "SIGHUP"
                2 -> "SIGINT"
                15 -> "SIGTERM"
                else -> "signal ${signal - 128}"
            }
            programFailed(
                "it was interrupted by $name (exit status $signal: a user's Ctrl-C, a scheduler, or the launcher ending the job) before it finished",
                signal, DUMP_GRACE_MILLIS,
            )
            return
        }
        finalizeOnce()
    }

    /**
     * `MPI_Abort` on [comm]: ends every rank of the job with exit code [code]. If MPI does not end
     * this process within [ABORT_GRACE_MILLIS] (MPICH 4.0's `MPI_Abort` can spin inside the
     * library while another thread of the process is blocked in a collective), or returns, the
     * process ends itself with `Runtime.halt(code)`: the launcher then sees a rank exit with
     * [code] and ends the others. Returns only when [halt] is replaced (tests with a mocked MPI).
     */
    fun abort(comm: Long, code: Int, graceMillis: Long = DUMP_GRACE_MILLIS) {
        System.err.flush()
        System.out.flush()
        // MPI_Abort ends the other ranks at once (Open MPI's mpirun sends SIGTERM and SIGKILL
        // shortly after, MPICH's hydra SIGKILL; docs/mpi.md), so every rank's flight recorder must
        // be on disk first: this rank's now, and the peers', which their notice thread writes within
        // one period of this rank's abort notice (sent when the communicator broke), during
        // DUMP_GRACE_MILLIS. Only one thread of the process goes through here.
        if (!aborting.compareAndSet(false, true)) return // another thread of this process is ending the job
        runCatching { FlightRecorder.writeShutdownDumps() }
        if (multiThreaded) {
            try {
                Thread.sleep(graceMillis)
            } catch (_: InterruptedException) {
            }
        }
        AbortEscalation.after("tpcomm-mpi-abort-guard", ABORT_GRACE_MILLIS) {
            haltNow(code, "MPI_Abort did not end the process within $ABORT_GRACE_MILLIS ms")
        }
        binding.abort(comm, code)
        haltNow(code, "MPI_Abort returned")
    }

    private fun haltNow(code: Int, why: String) {
        if (halted) return
        halted = true
        System.err.println("tpcomm-mpi: rank $worldRank: $why; ending the process with exit code $code")
        System.err.flush()
        // Runtime.halt does not run the other shutdown hooks: write the flight-recorder dumps first.
        runCatching { FlightRecorder.writeShutdownDumps() }
        halt(code)
    }

    @Volatile private var halted = false

    private val aborting = java.util.concurrent.atomic.AtomicBoolean(false)

    /**
     * This process's program failed: an exception escaped `main` ([MpiProgramFailure] sees it) or
     * it exited with status [code] != 0. Says so in one line (the cause itself was printed once
     * by the JVM), aborts every communicator of the process and tells the peers (their notice thread
     * names this rank: `CommunicatorAbortedException: ... rank R failed ...`), then ends the job
     * with `MPI_Abort(MPI_COMM_WORLD, code)` ([abort]: the dumps are written first). Nothing is
     * done once MPI was finalized. [graceMillis]: how long the peers get to print and dump first
     * ([abort]). Returns only when [halt] is replaced.
     */
    fun programFailed(description: String, code: Int, graceMillis: Long = PROGRAM_FAILURE_GRACE_MILLIS) {
        if (finalized || halted || aborting.get()) return
        System.err.println(
            "tpcomm-mpi: rank $worldRank: the program failed ($description); aborting the job now (MPI_Abort, exit code $code) " +
                "instead of letting the other ranks wait for their timeout",
        )
        System.err.flush()
        for (c in communicators.all()) {
            try {
                c.programFailed(description)
            } catch (t: Throwable) {
                System.err.println("tpcomm-mpi: rank $worldRank: could not tell the peers: $t")
            }
        }
        abort(worldComm, code, graceMillis)
    }

    /** Ends the process with an exit code; `Runtime.halt` (replaced by tests with a mocked MPI). */
    @Volatile var halt: (Int) -> Unit = { Runtime.getRuntime().halt(it) }

    companion object {
        /** How long `MPI_Finalize` waits when no communicator said (the default [dev.tpcomm.CommConfig.timeout] is longer). */
        const val DEFAULT_FINALIZE_WAIT_NANOS: Long = 600_000_000_000

        /** How long `MPI_Finalize` may take after a communicator of the process was aborted. */
        const val AFTER_ABORT_FINALIZE_WAIT_NANOS: Long = 10_000_000_000

        /** How long `MPI_Finalize` may take once every rank is known to have reached it. */
        const val AFTER_BARRIER_FINALIZE_WAIT_NANOS: Long = 10_000_000_000

        /** How much longer than the timeout `MPI_Finalize` waits, so that peers' deadlines report first. */
        const val FINALIZE_MARGIN_NANOS: Long = 2_000_000_000

        /** How long `MPI_Finalize` waits for a [whileMpiOpen] call in progress (a notice send drives MPI 0.2 s at most). */
        const val GATE_WAIT_MILLIS: Long = 1_000

        /** How long `MPI_Abort` may take to end the process before it ends itself. */
        const val ABORT_GRACE_MILLIS: Long = 2_000

        /**
         * How long [abort] waits before `MPI_Abort`, so that the peers (told by the abort notice,
         * which their notice thread sees within 50 ms) print the exception naming this rank and
         * write their flight-recorder dumps before the job is ended (0.3 s was too short for the
         * prints: on MPICH a peer of 3 loaded JVMs was ended before it printed). Only under `MPI_THREAD_MULTIPLE`, where the peers
         * can see the notice while blocked or busy.
         */
        const val DUMP_GRACE_MILLIS: Long = 1_000

        /**
         * [DUMP_GRACE_MILLIS] after a failed program ([programFailed]): no deadline presses, and
         * every peer must have printed the exception naming this rank (with 1 s, one MPICH peer of 3
         * loaded JVMs was ended before it printed, in 1 of 4 jobs; with 2 s, neither MPICH peer had
         * printed in one full test run of about five on 2 cores, `MpiFaultJobsTest` "throw").
         */
        const val PROGRAM_FAILURE_GRACE_MILLIS: Long = 3_000

        @Volatile private var instance: MpiRuntime? = null
        private val initLock = Any()

        /**
         * Runs [block] on [thread] and waits at most [timeoutMillis] for it; false when it did not
         * finish in time (or the thread was closed before running it).
         */
        private fun runOn(thread: NativeDispatcher, timeoutMillis: Long, block: () -> Unit): Boolean {
            val done = CountDownLatch(1)
            thread.dispatch(EmptyCoroutineContext, Runnable { try { block() } finally { done.countDown() } })
            return done.await(timeoutMillis, TimeUnit.MILLISECONDS)
        }

        /** The runtime if MPI was initialised in this process. */
        val current: MpiRuntime? get() = instance

        /**
         * Loads the library, sets the configuration's environment and initialises MPI, once per
         * process; later calls return the same runtime (their MPI settings are ignored).
         *
         * @throws dev.tpcomm.BackendUnavailableException when no library loads.
         * @throws IllegalArgumentException when an algorithm does not exist in the loaded implementation.
         * @throws IllegalStateException when `MPI_Init_thread` fails.
         */
        fun initialize(config: MpiConfig, env: Map<String, String> = System.getenv()): MpiRuntime {
            instance?.let { return it }
            synchronized(initLock) {
                instance?.let { return it }
                val library = MpiLibrary.load(config.library, env)
                for ((k, v) in config.initEnvironment(library.implementation)) Libc.setenv(k, v, true)
                val binding = FfmMpiBinding(library.abi)
                // Below MPI_THREAD_MULTIPLE one thread makes every MPI call, MPI_Init_thread included.
                val mpiThread = if (config.threadLevel < MpiThreadLevel.Multiple) NativeDispatcher("tpcomm-mpi") else null
                val init = {
                    Arena.ofConfined().use { a ->
                        val out = a.allocate(ValueLayout.JAVA_INT)
                        binding.initialized(out.address())
                        val already = out.get(ValueLayout.JAVA_INT, 0) != 0
                        val provided = if (already) {
                            config.threadLevel.value
                        } else {
                            val rc = binding.initThread(config.threadLevel.value, out.address())
                            check(rc == 0) { "MPI_Init_thread failed with error code $rc (${library.path}, ${library.implementation})" }
                            out.get(ValueLayout.JAVA_INT, 0)
                        }
                        MpiRuntime(library, binding, provided, !already, binding.queryCudaSupport(), mpiThread)
                    }
                }
                val runtime = try {
                    if (mpiThread == null) init() else {
                        var result: Result<MpiRuntime>? = null
                        check(runOn(mpiThread, Long.MAX_VALUE) { result = runCatching(init) }) { "MPI_Init_thread did not run" }
                        result!!.getOrThrow()
                    }
                } catch (t: Throwable) {
                    mpiThread?.close()
                    throw t
                }
                // MPI may grant more than was asked: at MPI_THREAD_MULTIPLE every communicator has its own thread.
                if (mpiThread != null && !runtime.sharesOneThread) mpiThread.close()
                Runtime.getRuntime().addShutdownHook(Thread({ runtime.onShutdown() }, "tpcomm-mpi-shutdown"))
                MpiProgramFailure.install { description, code -> runtime.programFailed(description, code) }
                instance = runtime
                return runtime
            }
        }
    }
}

/** Experiment: the spinning hand-off (`TPCOMM_MPI_HANDOFF_SPIN_US`, microseconds, 0 to 10,000; unset or 0: off). */
internal val HANDOFF_SPIN_NANOS: Long = dev.tpcomm.engine.SpinSetting.fromEnvironment("TPCOMM_MPI_HANDOFF_SPIN_US", defaultMicros = 0L)
