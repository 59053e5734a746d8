package dev.tpcomm.gpu

import dev.tpcomm.engine.Backoff
import dev.tpcomm.engine.NativeRequest
import dev.tpcomm.engine.OperationFailure
import dev.tpcomm.spi.CommunicationErrors

/**
 * The window in which one communicator's point-to-point calls issued back to back share one NCCL
 * group (`ncclGroupStart` ... `ncclGroupEnd`) on the device's thread, so that a send and the
 * receive that must progress with it are grouped (NVIDIA/nccl `docs/userguide/source/usage/p2p.rst`).
 * NCCL's group is per host thread (docs/nccl-semantics.md N10), so the open window is the
 * [DeviceThread]'s ([DeviceThread.p2pOwner]): any communicator of the thread that must issue
 * something else ends it first ([endP2pWindow]).
 *
 * Role: opens, holds and ends the group; aborts its communicator through [handle] when the group
 * fails. Thread-safety: none, native thread only. Lifetime: created and owned by [NcclCommunicator],
 * one per communicator.
 */
internal class PointToPointWindow(
    private val api: NcclApi,
    private val thread: DeviceThread,
    private val handle: NcclCommHandle,
    private val failures: NcclFailures,
) : P2pWindow {
    private val status = IntArray(1)

    /**
     * Opens (once) the group that point-to-point calls of this communicator issued back to back
     * share. NCCL's group is per host thread (docs/nccl-semantics.md N10), so another
     * communicator's open window on this device's thread is ended first. [nccl] checks the result.
     */
    fun join(sending: Boolean, nccl: (Int, String) -> Unit) {
        val owner = thread.p2pOwner
        if (owner != null && owner !== this) owner.endP2pWindow()
        if (thread.p2pOwner == null) {
            nccl(api.groupStart(), "ncclGroupStart")
            thread.groupDepth++
            thread.p2pOwner = this
            thread.p2pOpenedAt = System.nanoTime()
            thread.p2pSends = false
            thread.p2pRecvs = false
        }
        if (sending) thread.p2pSends = true else thread.p2pRecvs = true
    }

    /**
     * What the native thread waits on after a point-to-point call joined the window: calls queued
     * behind it join the open group. It ends once this thread's queue is drained and the group holds
     * both directions (a send and a receive: the exchange that must progress together), or
     * [P2P_GRACE_NANOS] after it opened, or when another call comes.
     */
    fun closeWhenDue(): NativeRequest {
        var polls = 0
        return NativeRequest {
            when {
                thread.p2pOwner !== this -> true
                polls++ == 0 -> false
                (thread.p2pSends && thread.p2pRecvs) || System.nanoTime() - thread.p2pOpenedAt > P2P_GRACE_NANOS -> { endP2pWindow(); true }
                else -> false
            }
        }
    }

    /**
     * Ends this communicator's point-to-point window (the open group on the device's thread) and
     * waits until the library accepted it; a failure aborts this communicator, whose calls in the
     * window then fail. Called by any communicator of the thread that must issue something else
     * first (native thread only).
     */
    override fun endP2pWindow() {
        if (thread.p2pOwner !== this) return
        thread.p2pOwner = null
        val end = api.groupEnd()
        thread.groupDepth--
        if (handle.failedWith() != null) {
            if (!handle.isReleased) handle.release(abort = true)
            return
        }
        var state = end
        val backoff = Backoff.forLibraryThread()
        while (state == NcclResult.IN_PROGRESS) {
            // The calls in the window are timed by the watchdog: a timeout aborts this communicator.
            if (handle.failedWith() != null) return
            state = api.asyncState(handle.comm, status)
            if (state == NcclResult.IN_PROGRESS) backoff.idle()
        }
        if (state != NcclResult.SUCCESS) {
            val text = runCatching { api.getErrorString(state) }.getOrNull()
            val message = "ncclGroupEnd of the point-to-point calls failed: ${NcclResult.name(state)} ($state)" + (text?.let { ": $it" } ?: "") +
                ". ${NcclResult.hint(state)}. The communicator was aborted."
            handle.abort(failures.named(OperationFailure.native(message, state), "send/recv", CommunicationErrors.NO_SEQUENCE))
        }
    }

    private companion object {
        /**
         * How long a group of point-to-point calls in one direction stays open for the opposite call
         * (the receive of a ring step issued right after its send) before it is issued alone.
         */
        const val P2P_GRACE_NANOS = 5_000_000L
    }
}
