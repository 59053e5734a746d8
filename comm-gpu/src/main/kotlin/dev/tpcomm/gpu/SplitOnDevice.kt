package dev.tpcomm.gpu

import dev.tpcomm.engine.Backoff
import dev.tpcomm.engine.OperationFailedSignal
import java.lang.foreign.Arena
import java.lang.foreign.ValueLayout

// ncclCommSplit on the device's thread, as an extension of the operation ([NcclOp]) that runs it.
// Stateless; native thread only.

/**
 * split's device part (also group's: color 0 for the members): `ncclCommSplit` once the
 * parent's stream drained, waited out until NCCL's job stored the child; the child (or null)
 * as a communicator sharing this device's native thread, made by [makeChild] from its handle, stream, rank and size.
 */
internal fun NcclOp.splitOnDevice(color: Int?, key: Int, commConfig: NcclCommConfig, makeChild: (comm: Long, stream: Long, rank: Int, worldSize: Int, world: Any) -> NcclCommunicator): NcclCommunicator? {
    // Nothing may be in flight on the parent during ncclCommSplit: drain its stream first
    // (on this thread, so no later call of this device's communicators is issued meanwhile).
    awaitStream()
    // The child appears in the cell only when NCCL's background job completes the split
    // (NVIDIA/nccl src/init.cc:3098-3099 sets *newcomm = NULL, 1959-1961 stores the child),
    // so the cell lives until the parent leaves ncclInProgress; after a failure or timeout it
    // is left allocated (8 bytes), since the aborted job may still write it.
    val cell = Arena.ofShared()
    val out = cell.allocate(ValueLayout.JAVA_LONG)
    out.set(ValueLayout.JAVA_LONG, 0, 0L)
    val code = api.commSplit(comm, color ?: NcclVersion.SPLIT_NOCOLOR, key, out, commConfig)
    try {
        return awaitChild(code, color, out, cell, makeChild)
    } catch (t: Throwable) {
        // The job may still store a half-built child into the cell (issue 35, finding 5): the device's
        // thread aborts it once the parent's abort (which this failure brings) let the job end.
        if (out.scope().isAlive) thread.adoptOrphan(out)
        throw t
    }
}

/** [splitOnDevice] after `ncclCommSplit` returned [code]: the child once NCCL's job stored it in [out]. */
private fun NcclOp.awaitChild(code: Int, color: Int?, out: java.lang.foreign.MemorySegment, cell: Arena, makeChild: (comm: Long, stream: Long, rank: Int, worldSize: Int, world: Any) -> NcclCommunicator): NcclCommunicator? {
    if (code != NcclResult.IN_PROGRESS) nccl(code, "ncclCommSplit")
    // A non-blocking ncclCommSplit returns ncclSuccess while its job still builds the child: the
    // trailing NCCLCHECK(ncclGroupEndInternal()) lets ncclInProgress pass (NVIDIA/nccl src/init.cc
    // ncclCommSplit, src/include/checks.h NCCLCHECK; docs/nccl-semantics.md N4). So whatever it
    // returned, wait until the parent leaves ncclInProgress (the job is linked to the parent:
    // src/group.cc ncclAsyncLaunch / ncclGroupEndInternal), then until the job stored the child
    // (ncclCommInitRankFunc stores *newcomm at its end; PyTorch's NCCLComm::split also waits for it).
    waitReady(comm, "ncclCommSplit")
    var child = out.get(ValueLayout.JAVA_LONG, 0)
    if (color != null && child == 0L) {
        val backoff = Backoff.forLibraryThread()
        while (child == 0L) {
            timedOut?.let { throw it }
            ctx.handle.failedWith()?.let { cause -> throw OperationFailedSignal(ctx.failures.aborted(cause)) }
            backoff.idle()
            child = out.get(ValueLayout.JAVA_LONG, 0)
        }
    }
    cell.close()
    if (child == 0L) return null
    try {
        checkAsync(child)
        val counts = IntArray(1)
        nccl(api.commCount(child, counts), "ncclCommCount")
        val ranks = IntArray(1)
        nccl(api.commUserRank(child, ranks), "ncclCommUserRank")
        val s = LongArray(1)
        cuda(runtime.streamCreateNonBlocking(s), "streamCreateWithFlags")
        // The child shares this native thread: one launch order per device (SharedDispatcher).
        // The child's world: the same on every member (the parent's world, this split's place among the
        // parent's collectives, the color), distinct from every other world (DeviceThread.orderAcross).
        return makeChild(child, s[0], ranks[0], counts[0], "${ctx.worldKey}/split${entry.collectiveSequence}/color$color")
    } catch (t: Throwable) {
        api.commAbort(child) // a child NCCL returned is aborted when it cannot be handed over (finding 5)
        throw t
    }
}
