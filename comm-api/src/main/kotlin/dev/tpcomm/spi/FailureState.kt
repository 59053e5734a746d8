package dev.tpcomm.spi

import dev.tpcomm.BackendUnavailableException
import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.NativeLibraryException
import java.util.concurrent.CopyOnWriteArrayList
import java.util.concurrent.atomic.AtomicReference

/**
 * The failure state of one communicator and the only place tpcomm builds its
 * [CommunicationException]s.
 *
 * **State.** A communicator is usable until its first failure: [abort] records the first cause
 * (later causes are ignored, the first one wins), [isAborted] turns true, and every later
 * [ensureUsable] throws [CommunicatorAbortedException] whose cause is that first failure. A
 * communicator closed by its user is aborted with a [CommunicatorAbortedException] saying so.
 *
 * **Builders.** [timeout], [mismatch], [aborted] and [failure] build the exceptions with the rank,
 * backend, operation and sequence number every message starts with, and the flight recorder's dump
 * taken at that moment ([dump]; a dump that throws is replaced by a note saying why). They do not
 * abort: call [fail] (abort and return) where the failure breaks the communicator.
 *
 * **Abort listeners.** [onAbort] actions run once, on the thread whose [abort] won, after the cause
 * is recorded: backends use them to wake waiters and to abort native communicators.
 *
 * Thread-safe and lock-free; [abort] may be called from any thread, including a watchdog while the
 * communicator's own thread is blocked in a native call.
 */
@InternalTpcommApi
public class FailureState(
    /** This rank, as every exception reports it. */
    public val rank: Int,
    /** The backend's name (`local`, `mpi`, `nccl`, `rccl`). */
    public val backend: String,
    private val dump: () -> String?,
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
                System.err.println("tpcomm: an abort listener of $backend rank $rank failed: $t")
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
        throw aborted(operation, sequence, abortedMessage(c), c)
    }

    /** The message of a call refused because of [cause]: what happened first, and that a new communicator is needed. */
    public fun abortedMessage(cause: Throwable): String {
        val what = (cause as? CommunicationException)?.let { "${it.operation} #${it.sequenceNumber}: ${it.reason}" }
            ?: (cause.message ?: cause.javaClass.name)
        return if (cause is CommunicatorAbortedException && cause.sequenceNumber < 0 && cause.operation == "close") {
            "the communicator was closed; create a new one"
        } else {
            "the communicator was aborted by an earlier failure ($what); create a new communicator to continue"
        }
    }

    /** [operation] passed its deadline. */
    public fun timeout(operation: String, sequence: Long, message: String, cause: Throwable? = null): CommunicationTimeoutException =
        CommunicationTimeoutException(message, rank, backend, operation, sequence, cause, takeDump())

    /** Ranks disagreed on [operation]: [ranks] differ from rank 0 in [fields]. */
    public fun mismatch(operation: String, sequence: Long, message: String, ranks: List<Int>, fields: List<String>): CollectiveMismatchException =
        CollectiveMismatchException(message, rank, backend, operation, sequence, ranks, fields, takeDump())

    /** A [CollectiveMismatchException] from [CollectiveSignature.compare]'s result. */
    public fun mismatch(operation: String, sequence: Long, mismatch: CollectiveSignature.Mismatch): CollectiveMismatchException =
        mismatch(operation, sequence, mismatch.message, mismatch.ranks, mismatch.fields)

    /** [operation] cannot run (or finish) because the communicator was aborted, by [cause] when known. */
    public fun aborted(operation: String, sequence: Long, message: String, cause: Throwable? = null): CommunicatorAbortedException =
        CommunicatorAbortedException(message, rank, backend, operation, sequence, cause, takeDump())

    /** [operation] failed for another reason (a native error, a peer's bad data). */
    public fun failure(operation: String, sequence: Long, message: String, cause: Throwable? = null): CommunicationException =
        CommunicationException(message, rank, backend, operation, sequence, cause, takeDump())

    /** A native library call behind [operation] failed with [result] (a runtime's code when [isRuntimeError]). */
    public fun nativeError(operation: String, sequence: Long, message: String, result: Int, isRuntimeError: Boolean = false): NativeLibraryException =
        NativeLibraryException(message, rank, backend, operation, sequence, result, isRuntimeError, takeDump())

    /** The exception that [close] records as the failure, so later calls say the communicator was closed. */
    public fun closed(): CommunicatorAbortedException =
        CommunicatorAbortedException("the communicator was closed; create a new one", rank, backend, "close", -1, null, takeDump())

    public companion object {
        /** A backend cannot be created here: [message] says what was tried and how to install what is missing. */
        @JvmStatic
        public fun unavailable(backend: String, message: String, cause: Throwable? = null): BackendUnavailableException =
            BackendUnavailableException(backend, message, cause)
    }

    private fun takeDump(): String? = try {
        dump()
    } catch (t: Throwable) {
        "{\"error\":\"the flight recorder could not be dumped: ${t.toString().replace("\"", "'")}\"}"
    }
}
