package dev.tpcomm.engine

import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.spi.CollectiveSignature
import dev.tpcomm.spi.CommunicationErrors
import dev.tpcomm.spi.FailureState
import kotlinx.coroutines.TimeoutCancellationException

/**
 * The failure half of a [CommunicatorFront]: its one failure state (the first failure wins), the
 * abort that records it and then lets the backend end what is in flight ([aborting]), the deadline's
 * action, the numbered-but-never-issued rule, and the named exceptions the front and its backend
 * throw (built by the communicator's one [CommunicationErrors]). One per communicator and rank,
 * owned by its front; thread-safe, never blocks.
 */
internal class FrontFailure(
    private val errors: CommunicationErrors,
    private val recorder: FlightRecorder,
    private val rank: Int,
    private val worldSize: Int,
    private val backendName: String,
    private val isClosed: () -> Boolean,
    /** The backend's [CommunicatorBackend.aborting]. */
    private val aborting: (Throwable, Int) -> Unit,
) {
    private val state = FailureState(errors)

    /**
     * The first failure of this communicator on this rank (a timeout, a mismatch, a library error,
     * a cancelled in-flight call, a peer's abort, the user's abort), or null while it is usable;
     * closing it is not a failure.
     */
    val cause: Throwable? get() = state.cause

    val isAborted: Boolean get() = state.isAborted

    /** Made once, at the first need: the cause every call after close names (operation `close`, no sequence number). */
    val closed: CommunicationException by lazy { errors.closed() }

    /**
     * Records [cause] as this communicator's failure unless it failed before (the first failure
     * wins), and then records the abort in the flight recorder and lets the backend end what is in
     * flight ([aborting], with [detail]). Returns true when [cause] became the failure.
     */
    fun abortWith(cause: Throwable, detail: Int): Boolean {
        if (!state.abort(cause)) return false
        recorder.recordAbort(cause)
        try {
            aborting(cause, detail)
        } catch (t: Throwable) {
            System.err.println("tpcomm: $backendName rank $rank: aborting the communicator after $cause failed: $t")
            t.printStackTrace()
        }
        return true
    }

    /**
     * The deadline of the operation recorded as [entry] passed and the backend named it [timeout]
     * (what it waited for, in the backend's words): the record carries it ([FlightRecorder.Entry.timeout]: the call ends
     * with it, named, whatever failed the communicator first), fails with it, and the communicator
     * aborts with it ([abortWith], [detail] for the backend's [aborting]). What the backend calls
     * from its deadline hook before it releases the caller. Returns whether [timeout] became the
     * communicator's failure.
     */
    fun expire(entry: FlightRecorder.Entry, timeout: CommunicationTimeoutException, detail: Int): Boolean {
        entry.timedOut = timeout
        entry.fail(timeout)
        return abortWith(timeout, detail)
    }

    /**
     * The front's rule for a call numbered (and recorded as [operation] #[sequence]) that this rank
     * gives up before issuing it ([cause]: its caller was cancelled while it waited for its output or
     * for the library's thread, a tensor was closed meanwhile): the peers' call of that number would
     * meet this rank's next call, or wait until their deadline, so the communicator aborts now,
     * unless it has no peers or is closed. A caller's deadline (`withTimeout`) is a
     * [CommunicationTimeoutException] ([cancellationReason]), anything else an abort. Returns the
     * exception when it became the communicator's failure, else null.
     */
    fun abortNotIssued(operation: String, sequence: Long, cause: Throwable): CommunicationException? {
        if (worldSize == 1 || isClosed() || isAborted) return null
        val why = "its peers pair calls by their order on the communicator, so theirs would wait for it or meet this rank's next call"
        val reason = if (cause is TimeoutCancellationException) {
            cancellationReason(operation, sequence, cause, "before it was issued ($why)")
        } else {
            errors.aborted(
                operation, sequence,
                "rank $rank gave up $operation #$sequence before issuing it (${cause.message ?: cause.javaClass.name}); $why: the communicator was aborted",
                cause,
            )
        }
        return reason.takeIf { abortWith(it, CommunicatorFront.ABORT_FROM_FRONT) }
    }

    /** The named exception of [failure] in [operation] (flight-record sequence [sequence]). */
    fun exceptionOf(failure: OperationFailure, operation: String, sequence: Long): CommunicationException = when (failure.kind) {
        OperationFailure.MISMATCH -> errors.mismatch(operation, sequence, failure.message, failure.ranks, failure.fields)
        OperationFailure.TIMEOUT -> errors.timeout(operation, sequence, failure.message, failure.cause)
        OperationFailure.NATIVE -> errors.nativeError(operation, sequence, failure.message, failure.code, failure.isRuntimeError)
        OperationFailure.OTHER -> errors.failure(operation, sequence, failure.message, failure.cause)
        else -> errors.aborted(operation, sequence, failure.message, failure.cause)
    }

    /**
     * Why the communicator aborts when this rank is cancelled inside [operation] ([where]): a
     * timeout when the cancellation is a caller's deadline (`withTimeout`), an abort otherwise.
     */
    fun cancellationReason(operation: String, sequence: Long, cause: Throwable?, where: String): CommunicationException =
        if (cause is TimeoutCancellationException) {
            errors.timeout(
                operation, sequence,
                "$operation did not complete before the caller's deadline (${cause.message}); cancelled $where, which aborts the communicator", cause,
            )
        } else {
            errors.aborted(operation, sequence, "rank $rank was cancelled $where in $operation; the collective cannot complete without it", cause)
        }

    /**
     * Why a call is refused (or ended) once the communicator failed with [cause]: an
     * [OperationFailure.ABORTED] whose message names the first failure (or says the communicator
     * was closed) and whose cause is [cause].
     */
    fun abortedFailure(cause: Throwable): OperationFailure =
        OperationFailure(OperationFailure.ABORTED, errors.abortedMessage(cause), cause)

    /**
     * Compares the signatures of every rank ([CollectiveSignature.SIZE] longs per rank in [all]) of
     * collective [sequence]; the mismatch found, as a failure, or null when all agree.
     */
    fun compareSignatures(all: LongArray, sequence: Long, description: String): OperationFailure? {
        val m = CollectiveSignature.compare(all, worldSize, sequence, description) ?: return null
        return OperationFailure(OperationFailure.MISMATCH, m.message, null, m.ranks, m.fields)
    }
}
