package dev.tpcomm.gpu

import dev.tpcomm.engine.CommunicatorFront.Companion.setSplitsWord
import dev.tpcomm.engine.OperationCall
import dev.tpcomm.engine.OperationFailure
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

// checkConsistency on the device: every rank's signature of a collective all-gathered through device
// memory before the collective is issued, as extensions of the operation ([NcclOp]) that runs them.
// Stateless; native thread only.

/**
 * checkConsistency (only when set to true: off by default on the GPU engine, since it waits
 * for the stream before each collective): all-gathers every rank's signature of this call
 * ([OperationCall.encodeSignature], staged through device memory) and fails with
 * [CollectiveMismatchException] naming the differing ranks and fields ([compare]: the front's compareSignatures).
 */
internal fun NcclOp.checkSignature(sig: LongArray, sequence: Long, compare: (LongArray, Long, String) -> OperationFailure?) {
    val n = sig.size * 8L
    val seg = staging(n * worldSize)
    MemorySegment.copy(sig, 0, seg, ValueLayout.JAVA_LONG, rank * n, sig.size)
    val dev = temp(n * worldSize)
    cuda(runtime.memcpyAsync(dev + rank * n, seg.address() + rank * n, n, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, stream), "memcpyAsync")
    nccl(api.allGather(dev + rank * n, dev, n, BYTES, comm, stream), "ncclAllGather")
    cuda(runtime.memcpyAsync(seg.address(), dev, n * worldSize, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, stream), "memcpyAsync")
    awaitStream()
    val all = LongArray(sig.size * worldSize) { i -> seg.getAtIndex(ValueLayout.JAVA_LONG, i.toLong()) }
    val mismatch = compare(all, sequence, "a ${ctx.backendName} communicator of $worldSize ranks") ?: return
    entry.fail(RuntimeException(mismatch.message))
    throw fail(ctx.failures.named(mismatch, name, entry.sequence))
}

/**
 * allToAllV's split check (with checkConsistency): every rank's inputSplits all-gathered (staged
 * as [checkSignature] stages its words), so each rank sees what its peers send it and puts
 * the splits word into [sig]'s extra word ([setSplitsWord]) before the signatures are compared.
 */
internal fun NcclOp.completeSplitsWord(sig: LongArray, inputSplits: List<Int>, outputSplits: List<Int>) {
    val n = 8L * worldSize
    val seg = staging(n * worldSize)
    for (j in 0 until worldSize) seg.setAtIndex(ValueLayout.JAVA_LONG, rank.toLong() * worldSize + j, inputSplits[j].toLong())
    val dev = temp(n * worldSize)
    cuda(runtime.memcpyAsync(dev + rank * n, seg.address() + rank * n, n, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, stream), "memcpyAsync")
    nccl(api.allGather(dev + rank * n, dev, n, BYTES, comm, stream), "ncclAllGather")
    cuda(runtime.memcpyAsync(seg.address(), dev, n * worldSize, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, stream), "memcpyAsync")
    awaitStream()
    val sentToMe = IntArray(worldSize) { j -> seg.getAtIndex(ValueLayout.JAVA_LONG, j.toLong() * worldSize + rank).toInt() }
    setSplitsWord(sig, 0, sentToMe, outputSplits)
}
