package dev.tpcomm

/**
 * A collective or point-to-point operation failed, or the communicator was aborted.
 *
 * Carries where it happened so a log line from any rank is enough to find the failing call:
 * [rank], [backend], [operation] and [sequenceNumber] (the per-communicator count of operations
 * issued, starting at 1; -1 when no operation was involved), plus [flightRecorderDump], the JSON
 * of the communicator's recent operations when one was taken.
 *
 * @property rank the rank (in the failing communicator) that threw this exception.
 * @property backend the backend's name (`local`, `mpi`, `nccl`, `rccl`).
 * @property operation the operation that failed (`allReduce`, `send`, ...; `abort` or `create` outside one).
 * @property sequenceNumber the operation's number in this communicator's program order, from 1; -1 when none was involved.
 * @property flightRecorderDump JSON of the communicator's recent operations, or null when none was taken.
 */
public open class CommunicationException(
    message: String,
    public val rank: Int,
    public val backend: String,
    public val operation: String,
    public val sequenceNumber: Long,
    cause: Throwable? = null,
    public val flightRecorderDump: String? = null,
) : RuntimeException("[$backend rank $rank, $operation #$sequenceNumber] $message", cause) {
    /** The message without the location prefix. */
    public val reason: String = message
}

/** An operation passed its deadline ([CommConfig.timeout] or an enclosing `withTimeout`); the communicator is aborted. */
public open class CommunicationTimeoutException(
    message: String,
    rank: Int,
    backend: String,
    operation: String,
    sequenceNumber: Long,
    cause: Throwable? = null,
    flightRecorderDump: String? = null,
) : CommunicationException(message, rank, backend, operation, sequenceNumber, cause, flightRecorderDump)

/**
 * [Communicator.monitoredBarrier] found ranks that did not reach it within its timeout:
 * [missingRanks] names them, in the communicator's numbering (a sub-communicator's own ranks), in
 * ascending order. A timeout, so handlers of [CommunicationTimeoutException] see it too; the
 * communicator is aborted.
 *
 * Rank 0 names the ranks it did not hear from (the first one, or all of them with `waitAllRanks`);
 * the ranks that arrived learn the same list from rank 0. [missingRanks] is empty on a rank that
 * reached the barrier but could not learn the list (rank 0 could not tell it, or the communicator
 * failed meanwhile: [cause] says how); then rank 0's exception names the ranks. A rank that gets no
 * answer from rank 0 at all names rank 0.
 *
 * @property missingRanks the ranks known not to have reached the barrier within the timeout; empty when unknown here.
 */
public open class MonitoredBarrierException(
    message: String,
    rank: Int,
    backend: String,
    operation: String,
    sequenceNumber: Long,
    public val missingRanks: List<Int>,
    cause: Throwable? = null,
    flightRecorderDump: String? = null,
) : CommunicationTimeoutException(message, rank, backend, operation, sequenceNumber, cause, flightRecorderDump)

/**
 * Ranks called different collectives at the same position of their program order, or the same
 * collective with different arguments. [ranks] lists the ranks that disagreed with the first rank
 * and [fields] the fields that differ (`operation`, `dtype`, `shape`, `op`, `root`, ...).
 *
 * @property ranks the ranks whose call differed from the first rank's.
 * @property fields the names of the fields that differed.
 */
public open class CollectiveMismatchException(
    message: String,
    rank: Int,
    backend: String,
    operation: String,
    sequenceNumber: Long,
    public val ranks: List<Int>,
    public val fields: List<String>,
    flightRecorderDump: String? = null,
) : CommunicationException(message, rank, backend, operation, sequenceNumber, null, flightRecorderDump)

/**
 * The communicator was aborted (by a failure on some rank, a cancellation, a timeout, or [AutoCloseable.close]);
 * this and every later call fail. [cause] holds the original failure when known.
 */
public open class CommunicatorAbortedException(
    message: String,
    rank: Int,
    backend: String,
    operation: String,
    sequenceNumber: Long,
    cause: Throwable? = null,
    flightRecorderDump: String? = null,
) : CommunicationException(message, rank, backend, operation, sequenceNumber, cause, flightRecorderDump)

/**
 * A backend cannot be created here: its native library or device is missing. The message says
 * what was tried and how to install what is missing.
 */
public open class BackendUnavailableException(
    backend: String,
    message: String,
    cause: Throwable? = null,
) : CommunicationException(message, -1, backend, "create", -1, cause)

/**
 * A call into a native library failed: [result] is the library's error code (`ncclResult_t` for
 * NCCL/RCCL, an MPI error class for MPI), or the device runtime's (`cudaError_t`/`hipError_t`) when
 * [isRuntimeError]. The communicator is aborted; every pending and later call fails with a
 * [CommunicatorAbortedException] whose cause is this exception.
 */
public open class NativeLibraryException(
    message: String,
    rank: Int,
    backend: String,
    operation: String,
    sequenceNumber: Long,
    /** The library's or runtime's error code. */
    public val result: Int,
    /** True when [result] is a device runtime's code rather than the communication library's. */
    public val isRuntimeError: Boolean = false,
    flightRecorderDump: String? = null,
) : CommunicationException(message, rank, backend, operation, sequenceNumber, null, flightRecorderDump)
