package dev.tpcomm.java

import java.time.Duration
import java.util.concurrent.CancellationException
import java.util.concurrent.CompletableFuture
import java.util.concurrent.CopyOnWriteArrayList
import java.util.concurrent.ExecutionException
import java.util.concurrent.TimeUnit
import java.util.concurrent.TimeoutException

/**
 * Gathers in-flight operations (any [CompletableFuture], typically from [JavaCommunicator]) so they
 * can be awaited, polled, cancelled and observed together, like a list of MPI requests.
 *
 * ```java
 * OperationQueue queue = new OperationQueue();
 * for (Tensor grad : grads) queue.add(comm.allReduce(grad));
 * computeSomethingElse();
 * queue.awaitAll();                    // throws the first failure, unwrapped
 * ```
 *
 * Operations keep the order they were added in; [add] returns an operation id (1, 2, ...) that
 * listeners receive and that never changes, while the *index* used by [get] and [awaitAny] is the
 * position among the operations currently in the queue (it shifts when [clearCompleted] removes
 * some). Finished operations stay in the queue until [clearCompleted].
 *
 * Failures are reported as the exception itself (`CommunicationException`, `IllegalArgumentException`,
 * or `CancellationException` for a cancelled operation), never wrapped in `CompletionException`.
 * The waiting methods do not throw checked exceptions: if a thread in a timed wait is interrupted,
 * it stops waiting, sets the interrupt flag again and reports "not finished"; [awaitAll] without a
 * timeout is not interruptible, like `CompletableFuture.join()`.
 *
 * Thread-safe: any thread may add, wait, cancel and register listeners concurrently.
 */
public class OperationQueue {
    private val lock = Any()
    private val entries = ArrayList<Entry>()
    private val byId = HashMap<Long, Entry>()
    private var nextId = 1L
    private val completionListeners = CopyOnWriteArrayList<CompletionListener>()
    private val failureListeners = CopyOnWriteArrayList<FailureListener>()

    private class Entry(val id: Long, val future: CompletableFuture<*>) {
        // Guarded by this entry's monitor.
        var finished = false
        var result: Any? = null
        var error: Throwable? = null
        val completion = ArrayList<CompletionListener>()
        val failure = ArrayList<FailureListener>()

        /** Completed once [finish] has called this operation's listeners: what the waiting methods wait for. */
        val settled = CompletableFuture<Unit>()
    }

    /**
     * Adds [future] and returns its operation id. Listeners registered for all operations will be
     * told when it finishes (at once, in this thread, if it already has).
     */
    public fun add(future: CompletableFuture<*>): Long {
        val entry = synchronized(lock) {
            Entry(nextId++, future).also { entries += it; byId[it.id] = it }
        }
        future.whenComplete { value, error -> finish(entry, value, error) }
        return entry.id
    }

    /** Number of operations in the queue that have not finished. */
    public fun pendingCount(): Int = snapshot().count { !it.future.isDone }

    /** Number of operations in the queue, finished or not. */
    public fun size(): Int = synchronized(lock) { entries.size }

    /** The future at [index] (0-based, in add order among the operations currently in the queue). */
    public fun get(index: Int): CompletableFuture<*> = entryAt(index).future

    /** The operation id of the future at [index]. */
    public fun operationId(index: Int): Long = entryAt(index).id

    /**
     * Waits until every operation now in the queue has finished and its listeners have been called.
     * If any failed, throws the failure of the first one (in add order) after all have finished,
     * unwrapped. Like `CompletableFuture.join()`, the wait is not interruptible (use [awaitAll] with
     * a timeout for a bounded wait); every collective has the communicator's deadline, so it does end.
     */
    public fun awaitAll() {
        val all = snapshot()
        // The queue's own completion of each entry, after its listeners ran; never exceptional.
        for (e in all) e.settled.join()
        throwFirstFailure(all)
    }

    /**
     * Waits at most [timeout] for every operation now in the queue to finish and its listeners to
     * have been called. Returns true if all finished successfully, false if some were still running at the deadline (they keep running;
     * see [cancelAll]) or the thread was interrupted (flag set again). If all finished and any failed,
     * throws the failure of the first one (in add order), unwrapped.
     */
    public fun awaitAll(timeout: Duration): Boolean {
        val deadline = System.nanoTime() + timeout.nanosSaturated()
        val all = snapshot()
        for (e in all) {
            try {
                e.settled.get(maxOf(0L, deadline - System.nanoTime()), TimeUnit.NANOSECONDS)
            } catch (_: TimeoutException) {
                return false
            } catch (_: InterruptedException) {
                Thread.currentThread().interrupt()
                return false
            }
        }
        throwFirstFailure(all)
        return true
    }

    /**
     * Waits at most [timeout] until some operation in the queue has finished (successfully or not)
     * and returns the index of the first finished one, or -1 if none finished in time, the queue is
     * empty, or the thread was interrupted (flag set again). Operations that had already finished
     * count: call [clearCompleted] to wait for a new one.
     */
    public fun awaitAny(timeout: Duration): Int {
        val all = snapshot()
        if (all.isEmpty()) return -1
        firstDone(all).let { if (it >= 0) return it }
        try {
            CompletableFuture.anyOf(*all.map { it.future }.toTypedArray()).get(timeout.nanosSaturated(), TimeUnit.NANOSECONDS)
        } catch (_: TimeoutException) {
            return -1
        } catch (_: InterruptedException) {
            Thread.currentThread().interrupt()
            return -1
        } catch (_: ExecutionException) {
        } catch (_: CancellationException) {
        }
        return firstDone(all)
    }

    /** Removes every finished operation (succeeded, failed or cancelled) and returns how many were removed. */
    public fun clearCompleted(): Int = synchronized(lock) {
        val done = entries.filter { it.future.isDone }
        entries.removeAll(done.toSet())
        done.forEach { byId.remove(it.id) }
        done.size
    }

    /**
     * Cancels every pending operation and returns how many were cancelled. Cancelling a collective
     * in flight aborts its communicator on every rank, so the failure listeners then see a
     * `CancellationException` here and the other ranks a `CommunicationException`.
     */
    public fun cancelAll(): Int = snapshot().count { it.future.cancel(true) }

    /** Calls [listener] for every operation that completes normally from now on. */
    public fun addCompletionListener(listener: CompletionListener) {
        completionListeners += listener
    }

    /** Calls [listener] for every operation that fails or is cancelled from now on. */
    public fun addFailureListener(listener: FailureListener) {
        failureListeners += listener
    }

    /** Stops calling [listener] (registered for all operations). Returns whether it was registered. */
    public fun removeCompletionListener(listener: CompletionListener): Boolean = completionListeners.remove(listener)

    /** Stops calling [listener] (registered for all operations). Returns whether it was registered. */
    public fun removeFailureListener(listener: FailureListener): Boolean = failureListeners.remove(listener)

    /**
     * Calls [listener] when the operation [operationId] completes normally; at once, in this thread,
     * if it already has.
     *
     * @throws IllegalArgumentException if no operation with that id is in the queue.
     */
    public fun addCompletionListener(operationId: Long, listener: CompletionListener) {
        val e = entryById(operationId)
        val now = synchronized(e) {
            if (!e.finished) { e.completion += listener; return }
            e.error == null
        }
        if (now) safely { listener.onCompletion(e.id, e.result) }
    }

    /**
     * Calls [listener] when the operation [operationId] fails or is cancelled; at once, in this
     * thread, if it already has.
     *
     * @throws IllegalArgumentException if no operation with that id is in the queue.
     */
    public fun addFailureListener(operationId: Long, listener: FailureListener) {
        val e = entryById(operationId)
        val error = synchronized(e) {
            if (!e.finished) { e.failure += listener; return }
            e.error
        }
        if (error != null) safely { listener.onFailure(e.id, error) }
    }

    override fun toString(): String = "OperationQueue(size=${size()}, pending=${pendingCount()})"

    private fun finish(entry: Entry, value: Any?, rawError: Throwable?) {
        val error = rawError?.let(::unwrapCompletion)
        val (completion, failure) = synchronized(entry) {
            entry.finished = true
            entry.result = value
            entry.error = error
            (entry.completion.toList() to entry.failure.toList()).also { entry.completion.clear(); entry.failure.clear() }
        }
        if (error == null) {
            for (l in completion) safely { l.onCompletion(entry.id, value) }
            for (l in completionListeners) safely { l.onCompletion(entry.id, value) }
        } else {
            for (l in failure) safely { l.onFailure(entry.id, error) }
            for (l in failureListeners) safely { l.onFailure(entry.id, error) }
        }
        entry.settled.complete(Unit)
    }

    private inline fun safely(call: () -> Unit) {
        try {
            call()
        } catch (t: Throwable) {
            reportListenerFailure(t)
        }
    }

    /** [Duration.toNanos], clamped to `0..Long.MAX_VALUE` instead of overflowing (as the JDK's timed waits treat negatives). */
    private fun Duration.nanosSaturated(): Long =
        if (isNegative) 0L else try { toNanos() } catch (_: ArithmeticException) { Long.MAX_VALUE }

    private fun snapshot(): List<Entry> = synchronized(lock) { entries.toList() }

    private fun entryAt(index: Int): Entry = synchronized(lock) {
        require(index in entries.indices) { "index $index is out of range; the queue holds ${entries.size} operations" }
        entries[index]
    }

    private fun entryById(id: Long): Entry = synchronized(lock) {
        byId[id] ?: throw IllegalArgumentException("no operation with id $id in this queue (ids come from add; cleared operations are gone)")
    }

    private fun firstDone(all: List<Entry>): Int = all.indexOfFirst { it.future.isDone }

    private fun throwFirstFailure(all: List<Entry>) {
        for (e in all) {
            if (e.future.isCompletedExceptionally) {
                val error = try {
                    e.future.join()
                    null
                } catch (t: Throwable) {
                    unwrapCompletion(t)
                }
                if (error != null) throw error
            }
        }
    }
}
