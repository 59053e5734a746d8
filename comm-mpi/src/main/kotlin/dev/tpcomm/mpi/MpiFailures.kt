package dev.tpcomm.mpi

import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.engine.CommunicatorFront
import dev.tpcomm.engine.NativeDispatcher
import dev.tpcomm.engine.OperationCall
import dev.tpcomm.engine.OperationFailure
import dev.tpcomm.spi.CommunicationErrors
import kotlin.coroutines.EmptyCoroutineContext
import kotlin.time.Duration

/**
 * How one MPI communicator fails: its checks right before a native call ([ensureUsable], [check]),
 * its aborts through the front's one failure state ([markBroken] -> [CommunicatorFront.abortWith],
 * and back through [aborting], which tells the peers), the peers' abort notices ([MpiAbortNotices]:
 * [peerAborted], [checkAbortNotices]), and the action of the front's deadline ([deadlinePassed]).
 * Knows the front only through its public failure API.
 *
 * Thread-safe where noted; the notices' receive side runs on the communicator's thread (or, under
 * `MPI_THREAD_MULTIPLE`, the watchdog's, [MpiAbortNotices.pollFromOtherThread]).
 */
internal class MpiFailures(
    private val front: CommunicatorFront,
    private val notices: MpiAbortNotices,
    private val runtime: MpiRuntime,
    private val binding: MpiBinding,
    private val dispatcher: NativeDispatcher,
    private val handle: Long,
    private val timeout: Duration,
    private val abortOnTimeout: Boolean,
    /** `CommConfig.effectiveCreationTimeout`: the deadline of split, group and duplicate, which their timeout names. */
    private val creationTimeout: Duration = timeout,
) {
    private val rank = front.rank
    private val worldSize = front.worldSize

    /** The rank whose deadline notice ([MpiAbortNotices.REASON_TIMEOUT]) broke this communicator, or -1. */
    @Volatile private var peerTimedOut: Int = -1

    /**
     * The library's own check right before a native call (the state may have changed since the
     * front's, while the call was queued): throws when the communicator is closed or failed; the call
     * recorded as [entry] that timed out ends with its own timeout.
     */
    fun ensureUsable(operation: String, entry: FlightRecorder.Entry?) {
        if (!front.isClosed) entry?.timeout?.let { throw it }
        front.unusable(operation, entry?.sequence ?: CommunicationErrors.NO_SEQUENCE)?.let { throw it }
    }

    /** Maps an MPI error code to a [CommunicationException] (and breaks the communicator). */
    fun check(rc: Int, operation: String, entry: FlightRecorder.Entry) {
        if (rc == 0) return
        val e = front.exceptionOf(OperationFailure.OTHER, operation, entry.sequence, "MPI error $rc: ${MpiErrors.describe(binding, rc)}")
        markBroken(e)
        throw e
    }

    /**
     * The exception for a failed staging copy of [operation] ([MpiDeviceStaging]); when [breaks],
     * the communicator is broken first (this rank cannot join the operation its peers are in).
     */
    fun stagingFailed(operation: String, message: String, cause: Throwable, breaks: Boolean): CommunicationException {
        val e = front.exceptionOf(OperationFailure.OTHER, operation, -1, message, cause)
        if (breaks) markBroken(e)
        return e
    }

    /**
     * Aborts this communicator with [cause] through the front (first cause wins), which then tells
     * the peers ([aborting]) unless [notifyPeers] is false (the cause is a peer's notice), with
     * [reason]. The notice is sent from the communicator's thread, after the call it may be blocked
     * in; with [now] (the job is about to end: a deadline with `MPI_Abort`, or the program failed)
     * and under `MPI_THREAD_MULTIPLE`, from this thread at once. Not at once for a caller's deadline
     * or a cancellation: this rank's blocking call is still inside MPI and completes when the peers
     * join it, which a notice received first would make them refuse (the call, and the job with it,
     * would then only end at the communicator's deadline).
     */
    fun markBroken(cause: Throwable, notifyPeers: Boolean = true, reason: Int = MpiAbortNotices.REASON_FAILED, now: Boolean = false) {
        front.abortWith(cause, abortDetail(notifyPeers, reason, now))
    }

    /**
     * The front recorded the communicator's failure ([CommunicatorBackend.aborting] with [detail]):
     * the process's MPI counts as broken, and the peers are told with an abort notice ([markBroken]'s
     * detail: whether, why, and whether at once; an abort of the front's own tells them, as a failure).
     */
    fun aborting(detail: Int) {
        runtime.broken = true
        val notify = detail == CommunicatorFront.ABORT_FROM_FRONT || detail and NOTIFY_PEERS != 0
        if (!notify || worldSize == 1 || front.isClosed) return
        val reason = if (detail == CommunicatorFront.ABORT_FROM_FRONT) MpiAbortNotices.REASON_FAILED else detail and REASON_MASK
        if (dispatcher.isNativeThread || (detail and NOTIFY_NOW != 0 && runtime.multiThreaded)) {
            notices.send(reason)
        } else {
            dispatcher.dispatch(EmptyCoroutineContext, Runnable { notices.send(reason) })
        }
    }

    /**
     * A peer's abort notice arrived (seen by the watchdog, [MpiCommunicators.Member.pollPeerNotices]):
     * the communicator is aborted, naming [from], and its flight recorder dumped. When this rank is
     * blocked inside a collective ([blockedIn] #[blockedSequence]; null when idle) that can now never
     * complete, it also prints the exception; the call stays under the watchdog, and the job ends by
     * [from]'s own `MPI_Abort` (which waits for this print and dump: a second `MPI_Abort` from here
     * could end the other peers before theirs) or, failing that, at this call's deadline
     * ([deadlinePassed]). An idle communicator is only marked: its next call throws
     * [CommunicatorAbortedException].
     */
    fun peerAborted(from: Int, reason: Int, blockedIn: String?, blockedSequence: Long) {
        if (reason == MpiAbortNotices.REASON_TIMEOUT) peerTimedOut = from
        val operation = blockedIn ?: PEER_NOTICE
        val sequence = if (blockedIn != null) blockedSequence else CommunicationErrors.NO_SEQUENCE
        val e = front.exceptionOf(OperationFailure.ABORTED, operation, sequence, peerAbortMessage(from, reason))
        markBroken(e, notifyPeers = false)
        if (blockedIn == null) return
        System.err.println("tpcomm-mpi: rank $rank: ${e.javaClass.name}: ${e.message}")
        System.err.flush()
    }

    /** Polls the peers' notices from another thread than the communicator's (`MPI_THREAD_MULTIPLE` only); see [peerAborted]. */
    fun pollPeerNotices(blockedIn: () -> String?, blockedSequence: () -> Long) {
        if (worldSize == 1 || !runtime.multiThreaded || front.isClosed || front.isAborted) return
        val from = notices.pollFromOtherThread()
        if (from >= 0) peerAborted(from, notices.reason, blockedIn(), blockedSequence())
    }

    /** This process's program failed ([MpiRuntime.programFailed]): the communicator aborts, and the peers are told at once. */
    fun programFailed(description: String) {
        if (front.isClosed || front.isAborted) return
        markBroken(
            front.exceptionOf(OperationFailure.ABORTED, PROGRAM_FAILED, CommunicationErrors.NO_SEQUENCE, "the program of rank $rank failed: $description"),
            reason = MpiAbortNotices.REASON_PROGRAM_FAILED,
            now = true,
        )
    }

    private fun peerAbortMessage(from: Int, reason: Int): String = when (reason) {
        MpiAbortNotices.REASON_PROGRAM_FAILED ->
            "rank $from failed (an exception escaped its program, it exited with a non-zero status, or a signal interrupted it; its output names the cause)"
        MpiAbortNotices.REASON_TIMEOUT -> "rank $from aborted the communicator: its call passed its deadline"
        else -> "rank $from aborted the communicator (it failed, timed out, or cancelled an in-flight call)"
    }

    private fun peerTimeoutMessage(from: Int, operation: String): String =
        "$operation did not complete: rank $from passed its deadline ($timeout) first and aborted the communicator " +
            "(a rank may have stalled, died, or called a different collective)"

    /**
     * Fails with [CommunicatorAbortedException] when another rank reported that it broke this
     * communicator; an operation [inFlight] that a peer's deadline ended fails with
     * [CommunicationTimeoutException] instead (the peer timed out waiting in it, as this rank would
     * have). Communicator's thread only.
     */
    fun checkAbortNotices(operation: String, entry: FlightRecorder.Entry, inFlight: Boolean = false) {
        if (worldSize == 1) return
        if (!notices.receivePosted) check(notices.postReceive(), operation, entry)
        val from = notices.arrived()
        if (from < 0) return
        val reason = notices.reason
        if (reason == MpiAbortNotices.REASON_TIMEOUT) peerTimedOut = from
        val e = if (inFlight && reason == MpiAbortNotices.REASON_TIMEOUT) {
            front.exceptionOf(OperationFailure.TIMEOUT, operation, entry.sequence, peerTimeoutMessage(from, operation))
        } else {
            front.exceptionOf(OperationFailure.ABORTED, operation, entry.sequence, peerAbortMessage(from, reason))
        }
        markBroken(e, notifyPeers = false)
        throw e
    }

    /** A pending operation of a communicator broken by another call fails at once (its buffers stay pinned). */
    fun ensureNotBrokenWhileInFlight(operation: String, entry: FlightRecorder.Entry) {
        val cause = front.failure ?: return
        entry.timeout?.let { throw it }
        val late = peerTimedOut
        if (late >= 0) throw front.exceptionOf(OperationFailure.TIMEOUT, operation, entry.sequence, peerTimeoutMessage(late, operation), cause)
        throw front.exceptionOf(
            OperationFailure.ABORTED, operation, entry.sequence, "aborted while this call was in flight: ${front.abortedMessage(cause)}", cause,
        )
    }

    /**
     * The front's deadline for the operation recorded as [entry] (called on the watchdog's thread,
     * while this communicator's thread may be blocked inside MPI): builds the timeout, breaks the
     * communicator ([CommunicatorFront.expire]), releases a caller still queued for the
     * communicator's thread ([MpiHandOff.release], through [call]'s state), prints the diagnostic,
     * and aborts the job if configured. A non-blocking operation then ends with that exception at
     * its next poll ([ensureNotBrokenWhileInFlight]); a blocking one cannot be interrupted, so with
     * [MpiConfig.abortOnTimeout] (the default) the job ends with `MPI_Abort`.
     */
    fun deadlinePassed(entry: FlightRecorder.Entry, call: OperationCall?) {
        if (front.isClosed) return
        val operation = entry.operation
        val sequence = entry.sequence
        val e = front.exceptionOf(
            OperationFailure.TIMEOUT,
            operation, sequence,
            "$operation did not complete within ${if (operation in CREATIONS) "$creationTimeout (CommConfig.creationTimeout)" else "$timeout"} (a rank may have stalled, died, or called a different collective)" +
                if (abortOnTimeout) "; calling MPI_Abort so that every rank of the job ends" else "",
        ) as CommunicationTimeoutException
        val dump = e.flightRecorderDump
        front.expire(entry, e, abortDetail(notifyPeers = true, MpiAbortNotices.REASON_TIMEOUT, now = abortOnTimeout))
        // A caller still queued for the communicator's thread is released now; its call never starts.
        (call?.state as? MpiHandOff)?.release(e)
        System.err.println("tpcomm-mpi: rank $rank: ${e.javaClass.name}: ${e.message}\ntpcomm-mpi: flight recorder of rank $rank: $dump")
        System.err.flush()
        if (abortOnTimeout) runtime.abort(handle, ABORT_CODE)
    }

    companion object {
        /** The exit code of a job this library ends (`MPI_Abort`, or the process's own halt). */
        const val ABORT_CODE: Int = 14

        /** The operation named by the abort of a communicator whose process's program failed ([MpiRuntime.programFailed]). */
        private const val PROGRAM_FAILED: String = "program"

        /** The operation named when a peer's notice aborts a communicator between calls. */
        private const val PEER_NOTICE: String = "between calls"

        /** [markBroken]'s detail for the front's [aborting]: the notice's reason, and whether and when to send it. */
        private const val REASON_MASK: Int = 0xff
        private const val NOTIFY_PEERS: Int = 1 shl 8
        private const val NOTIFY_NOW: Int = 1 shl 9

        /** Set in every detail of this backend's, so that none equals [CommunicatorFront.ABORT_FROM_FRONT]. */
        private const val DETAIL_SET: Int = 1 shl 10

        /** The operations timed against the creation timeout (CommunicatorFront's creationTimeout). */
        private val CREATIONS = setOf(dev.tpcomm.spi.CollectiveOp.Split.apiName, dev.tpcomm.spi.CollectiveOp.Group.apiName, dev.tpcomm.spi.CollectiveOp.Duplicate.apiName)

        /** The detail [markBroken] passes to the front's abort (and so to [aborting]). */
        fun abortDetail(notifyPeers: Boolean, reason: Int, now: Boolean): Int =
            DETAIL_SET or (if (notifyPeers) NOTIFY_PEERS else 0) or (if (now) NOTIFY_NOW else 0) or (reason and REASON_MASK)
    }
}
