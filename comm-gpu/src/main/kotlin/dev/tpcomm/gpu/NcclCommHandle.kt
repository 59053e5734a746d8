package dev.tpcomm.gpu

import dev.tpcomm.CommunicationException
import dev.tpcomm.engine.AbortEscalation
import dev.tpcomm.engine.Backoff

/**
 * The lifecycle of one `ncclComm_t` ([comm]): its one release, `ncclCommAbort` or
 * `ncclCommFinalize` then `ncclCommDestroy` ([release]). The communicator's failure is the front's
 * ([dev.tpcomm.engine.CommunicatorFront.abortWith]): [failedWith] reads it, [abort] records it
 * there, and the front's abort comes back as [aborted], which calls `ncclCommAbort`.
 *
 * Role: the single owner of the handle's end; every other part of a communicator asks it whether
 * the communicator failed or was closed ([failedWith]) and aborts through it ([abort]).
 * Thread-safety: [abort], [aborted], [failedWith] and [release] from any thread (the handle is
 * released once); [releaseAfterGroups] on the native thread only. Lifetime: created and owned by
 * [NcclCommunicator], for as long as the communicator lives.
 */
internal class NcclCommHandle(
    /** The communicator's library calls ([CommCallGuard]): this class releases [comm] through it. */
    private val guard: CommCallGuard,
    /** The `ncclComm_t`. */
    val comm: Long,
    private val thread: DeviceThread,
    private val backendName: String,
    private val timeoutNanos: Long,
    /** The front's first failure, or its closed exception once closed; null while usable. */
    private val failure: () -> Throwable?,
    /** The front's abort ([dev.tpcomm.engine.CommunicatorFront.abortWith]): first failure wins. */
    private val abortFront: (Throwable) -> Unit,
) {
    private val status = IntArray(1)

    /** The communicator's first failure (or the closed exception once closed), or null. */
    fun failedWith(): Throwable? = failure()

    /** True once `ncclCommAbort` or `ncclCommDestroy` was called: nothing may touch [comm] any more. */
    val isReleased: Boolean get() = guard.released.get()

    /** Aborts the communicator with [cause] through the front (first failure wins); the front's abort then calls [aborted]. */
    fun abort(cause: CommunicationException) = abortFront(cause)

    /**
     * The front recorded the communicator's failure: call `ncclCommAbort`. On the native thread
     * inside an open group the abort waits for the group's end ([NcclOp.group]): NCCL would only
     * carry it out at `ncclGroupEnd` (NVIDIA/nccl `src/init.cc`, `ncclCommAbort` runs
     * inside `ncclGroupStartInternal`/`ncclGroupEndInternal`). From any other thread it is queued on
     * the native thread; when that thread does not take it within [ABORT_GRACE_MS] (it is busy with
     * another communicator's operation, or blocked in a runtime call), it is called from a separate
     * thread, as PyTorch's watchdog calls `ncclCommAbort` while the issuing thread is blocked
     * (pytorch/pytorch `ProcessGroupNCCL::abortCommsFromMap`), but only once no call on the
     * communicator is running and never before one (issue 35, finding 4: [CommCallGuard]; NVIDIA/nccl
     * `usage/communicators.rst`: "make sure no thread is calling any NCCL operations while calling
     * ncclCommAbort"). Every communicator is non-blocking, so a call on it returns and lets the
     * abort in; calls after it never reach the library. The escalation retries at most
     * [escalationBoundMillis] (the communicator's timeout, between 1 s and 60 s): a call that holds
     * the communicator longer is stuck in the driver, so it stops there with an
     * [dev.tpcomm.engine.AbortIncompleteException], logged and added to the communicator's failure as
     * suppressed; its thread ends, and the abort queued on the native thread runs when that call returns.
     */
    fun aborted() {
        if (thread.dispatcher.isNativeThread) {
            releaseAfterGroups()
            return
        }
        thread.runOnThread(Runnable { releaseAfterGroups() })
        AbortEscalation.retrying(
            "tpcomm-$backendName-abort", ABORT_GRACE_MS, escalationBoundMillis(timeoutNanos),
            what = "$backendName: ncclCommAbort from a second thread",
            attempt = { isReleased || thread.dispatcher.isClosed || guard.releaseOnce(ABORT_GRACE_MS * 1_000_000) { it.commAbort(comm) } },
            // The communicator's failure is recorded (its callers have their exception); the abort stays
            // queued on the native thread, which runs it once the call holding the communicator returns.
            gaveUp = { e -> failedWith()?.addSuppressed(e) },
        )
    }

    /**
     * On the native thread: `ncclCommAbort` once no group is open on it. This communicator's own
     * point-to-point window is ended first (ending it releases the communicator), another's too
     * (an abort inside it would join that group: docs/nccl-semantics.md N12); inside an [NcclOp.group]
     * body the abort waits for the group's end, which releases it.
     */
    fun releaseAfterGroups() {
        thread.p2pOwner?.endP2pWindow()
        if (thread.groupDepth == 0) release(abort = true)
    }

    /**
     * Releases [comm] once: `ncclCommAbort` when [abort], else finalize then destroy (abort if that
     * fails). Waits up to [waitNanos] for a call on [comm] that is running ([CommCallGuard]); false
     * when it is still running then (nothing released).
     */
    fun release(abort: Boolean, waitNanos: Long = Long.MAX_VALUE): Boolean = guard.releaseOnce(waitNanos) { api ->
        if (abort) {
            api.commAbort(comm)
        } else {
            // ncclCommFinalize first, polled to success, then ncclCommDestroy (NVIDIA/nccl
            // docs/userguide/source/usage/communicators.rst:330-350; init.cc:2783 ncclCommFinalize). If it
            // fails or does not finish within the timeout, abort instead; nothing touches comm afterwards.
            var code = api.commFinalize(comm)
            if (code == NcclResult.IN_PROGRESS) {
                val deadline = System.nanoTime() + timeoutNanos
                val backoff = Backoff.forLibraryThread()
                while (true) {
                    code = api.asyncState(comm, status)
                    if (code != NcclResult.IN_PROGRESS || System.nanoTime() - deadline > 0) break
                    backoff.idle()
                }
            }
            if (code == NcclResult.SUCCESS) api.commDestroy(comm) else api.commAbort(comm)
        }
        thread.reapOrphans(api)
    }

    internal companion object {
        /** How long an abort from another thread waits for the native thread before calling `ncclCommAbort` itself. */
        const val ABORT_GRACE_MS = 100L

        /** How long the forced abort retries: the communicator's timeout ([timeoutNanos]), at least 1 s and at most 60 s. */
        fun escalationBoundMillis(timeoutNanos: Long): Long = (timeoutNanos / 1_000_000L).coerceIn(1_000L, 60_000L)
    }
}
