package dev.tpcomm.spi

import dev.tpcomm.BackendUnavailableException
import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.MonitoredBarrierException
import dev.tpcomm.NativeLibraryException

/**
 * The only place tpcomm builds its [CommunicationException]s: every message starts with the rank,
 * backend, operation and sequence number, and carries the flight recorder's dump taken at that
 * moment ([dump]; a dump that throws is replaced by a note saying why). Building an exception
 * changes no state: [FailureState] records the first failure of a communicator.
 *
 * **Conventions.** Operations are named as the API names them (`allReduce`, `send`, ...); a
 * communicator's lifecycle steps are [CREATE] (creation and the native init it waits for), `split`
 * and [CLOSE]. Calls that have no place in the communicator's sequence of operations (lifecycle
 * steps, a call that never reached the library) use [NO_SEQUENCE].
 *
 * Thread-safe (stateless apart from [dump], which it only calls).
 */
@InternalTpcommApi
public class CommunicationErrors @JvmOverloads constructor(
    /** This rank, as every exception reports it (-1 for a whole in-process world). */
    public val rank: Int,
    /** The backend's name (`local`, `mpi`, `nccl`, `rccl`). */
    public val backend: String,
    private val dump: () -> String? = { null },
) {
    /** [operation] passed its deadline. */
    public fun timeout(operation: String, sequence: Long, message: String, cause: Throwable? = null): CommunicationTimeoutException =
        CommunicationTimeoutException(message, rank, backend, operation, sequence, cause, takeDump())

    /** A monitored barrier found [missingRanks] missing (empty when this rank cannot know which); see [MonitoredBarrierException]. */
    public fun monitoredBarrier(operation: String, sequence: Long, message: String, missingRanks: List<Int>, cause: Throwable? = null): MonitoredBarrierException =
        MonitoredBarrierException(message, rank, backend, operation, sequence, missingRanks.toList(), cause, takeDump())

    /** Ranks disagreed on [operation]: [ranks] differ from rank 0 in [fields]. */
    public fun mismatch(operation: String, sequence: Long, message: String, ranks: List<Int>, fields: List<String>): CollectiveMismatchException =
        CollectiveMismatchException(message, rank, backend, operation, sequence, ranks, fields, takeDump())

    /** A [CollectiveMismatchException] from [CollectiveSignature.compare]'s result. */
    public fun mismatch(operation: String, sequence: Long, mismatch: CollectiveSignature.Mismatch): CollectiveMismatchException =
        mismatch(operation, sequence, mismatch.message, mismatch.ranks, mismatch.fields)

    /** [operation] cannot run (or finish) because the communicator was aborted, by [cause] when known. */
    public fun aborted(operation: String, sequence: Long, message: String, cause: Throwable? = null): CommunicatorAbortedException =
        CommunicatorAbortedException(message, rank, backend, operation, sequence, cause, takeDump())

    /** [operation] refused because the communicator already failed with [cause] (see [abortedMessage]). */
    public fun abortedBy(operation: String, sequence: Long, cause: Throwable): CommunicatorAbortedException =
        aborted(operation, sequence, abortedMessage(cause), cause)

    /** [operation] failed for another reason (a native error, a peer's bad data). */
    public fun failure(operation: String, sequence: Long, message: String, cause: Throwable? = null): CommunicationException =
        CommunicationException(message, rank, backend, operation, sequence, cause, takeDump())

    /** A native library call behind [operation] failed with [result] (a runtime's code when [isRuntimeError]). */
    public fun nativeError(operation: String, sequence: Long, message: String, result: Int, isRuntimeError: Boolean = false): NativeLibraryException =
        NativeLibraryException(message, rank, backend, operation, sequence, result, isRuntimeError, takeDump())

    /** The exception a user's `close()` records as the failure, so later calls say the communicator was closed. */
    public fun closed(): CommunicatorAbortedException =
        CommunicatorAbortedException("the communicator was closed; create a new one", rank, backend, CLOSE, NO_SEQUENCE, null, takeDump())

    /** The message of a call refused because of [cause]: what happened first, and that a new communicator is needed. */
    public fun abortedMessage(cause: Throwable): String {
        val what = (cause as? CommunicationException)?.let { "${it.operation} #${it.sequenceNumber}: ${it.reason}" }
            ?: (cause.message ?: cause.javaClass.name)
        return if (cause is CommunicatorAbortedException && cause.sequenceNumber < 0 && cause.operation == CLOSE) {
            "the communicator was closed; create a new one"
        } else {
            "the communicator was aborted by an earlier failure ($what); create a new communicator to continue"
        }
    }

    private fun takeDump(): String? = try {
        dump()
    } catch (t: Throwable) {
        "{\"error\":\"the flight recorder could not be dumped: ${t.toString().replace("\"", "'")}\"}"
    }

    public companion object {
        /** The operation name of a communicator's creation (and the native init it waits for). */
        public const val CREATE: String = "create"

        /** The operation name of a user's `close()`. */
        public const val CLOSE: String = "close"

        /** The sequence number of a call outside the communicator's sequence of operations. */
        public const val NO_SEQUENCE: Long = -1L

        /** A backend cannot be created here: [message] says what was tried and how to install what is missing. */
        @JvmStatic
        public fun unavailable(backend: String, message: String, cause: Throwable? = null): BackendUnavailableException =
            BackendUnavailableException(backend, message, cause)
    }
}
