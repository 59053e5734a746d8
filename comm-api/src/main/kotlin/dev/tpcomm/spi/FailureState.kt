package dev.tpcomm.spi

import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.InternalTpcommApi
import java.util.concurrent.CopyOnWriteArrayList
import java.util.concurrent.atomic.AtomicReference

/**
 * The failure state of one communicator: it is usable until its first failure. [abort] records the
 * first cause (later causes are ignored, the first one wins), [isAborted] turns true, and every later
 * [ensureUsable] throws [CommunicatorAbortedException] whose cause is that first failure. A
 * communicator closed by its user is aborted with [CommunicationErrors.closed]. The exceptions
 * themselves are built by [errors], the communicator's one [CommunicationErrors].
 *
 * One per communicator and rank, held by the front (`CommunicatorFront`), which runs the backend's
 * abort itself after [abort] won; no backend keeps one of its own.
 *
 * **Abort listeners.** [onAbort] actions run once, on the thread whose [abort] won, after the cause
 * is recorded.
 *
 * Thread-safe and lock-free; [abort] may be called from any thread, including a watchdog while the
 * communicator's own thread is blocked in a native call.
 */
@InternalTpcommApi
public class FailureState(
    /** Builds this communicator's exceptions (and [ensureUsable]'s). */
    public val errors: CommunicationErrors,
) {
    private val first = AtomicReference<Throwable?>(null)
    private val listeners = CopyOnWriteArrayList<(Throwable) -> Unit>()

    /** True once the communicator failed or was closed. */
    public val isAborted: Boolean get() = first.get() != null

    /** The first failure, or null while the communicator is usable. */
    public val cause: Throwable? get() = first.get()

    /**
     * Records [cause] as the communicator's failure unless one was recorded before, and then runs
     * the [onAbort] listeners (on this thread; a listener that throws is reported to stderr and
     * the others still run). Returns true when this call recorded the failure.
     */
    public fun abort(cause: Throwable): Boolean {
        if (!first.compareAndSet(null, cause)) return false
        for (l in listeners) {
            try {
                l(cause)
            } catch (t: Throwable) {
                System.err.println("tpcomm: an abort listener of ${errors.backend} rank ${errors.rank} failed: $t")
            }
        }
        return true
    }

    /** Runs [action] with the failure when the communicator is aborted (at once if it already is). */
    public fun onAbort(action: (Throwable) -> Unit) {
        val once = java.util.concurrent.atomic.AtomicBoolean(false)
        val guarded: (Throwable) -> Unit = { c -> if (once.compareAndSet(false, true)) action(c) }
        listeners += guarded
        val c = first.get()
        if (c != null) guarded(c)
    }

    /** Records [exception] as the failure (see [abort]) and returns it, for `throw state.fail(...)`. */
    public fun <E : CommunicationException> fail(exception: E): E {
        abort(exception)
        return exception
    }

    /**
     * Throws [CommunicatorAbortedException] for [operation] (sequence [sequence]) if the
     * communicator was aborted or closed; the exception's cause is the first failure.
     */
    public fun ensureUsable(operation: String, sequence: Long) {
        val c = first.get() ?: return
        throw errors.abortedBy(operation, sequence, c)
    }
}
