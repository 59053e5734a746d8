package dev.tpcomm.gpu

import dev.tpcomm.Tensor

// The collectives' device parts: the NCCL calls and device copies each collective issues on its
// operation's stream, as extensions of the operation ([NcclOp]) that runs them on the native thread.
// Stateless; native thread only. Dimension other than 0 (outer size > 1): blocks are rearranged with
// 2-D async copies through a temporary device buffer.

/** `count` contiguous blocks of `outer` rows of `rowBytes` each, at [blocks], into the columns of [dst]. */
private fun NcclOp.blocksToColumns(dst: Long, blocks: Long, blockBytes: Long, outer: Long) {
    val row = blockBytes / outer
    for (r in 0 until worldSize) {
        cuda(
            runtime.memcpy2DAsync(dst + r * row, row * worldSize, blocks + r * blockBytes, row, row, outer, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, stream),
            "memcpy2DAsync",
        )
    }
}

/** The inverse of [blocksToColumns]: column block `r` of [src] into contiguous block `r` at [blocks]. */
private fun NcclOp.columnsToBlocks(blocks: Long, src: Long, blockBytes: Long, outer: Long) {
    val row = blockBytes / outer
    for (r in 0 until worldSize) {
        cuda(
            runtime.memcpy2DAsync(blocks + r * blockBytes, row, src + r * row, row * worldSize, row, outer, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, stream),
            "memcpy2DAsync",
        )
    }
}

/** gather's device part: on [root] the blocks of every rank into [out] (through a temporary when [outer] > 1), elsewhere one ncclSend. */
internal fun NcclOp.gatherOnDevice(input: Tensor, out: Tensor?, root: Int, outer: Long) {
    if (rank == root) {
        out!!
        val blocks = if (outer == 1L) out.address else temp(out.byteSize)
        group {
            for (r in 0 until worldSize) {
                val slot = blocks + r * input.byteSize
                if (r == rank) {
                    cuda(runtime.memcpyAsync(slot, input.address, input.byteSize, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, stream), "memcpyAsync")
                } else {
                    nccl(api.recv(slot, input.byteSize, BYTES, r, comm, stream), "ncclRecv")
                }
            }
        }
        if (outer != 1L) blocksToColumns(out.address, blocks, input.byteSize, outer)
    } else {
        group { nccl(api.send(input.address, input.byteSize, BYTES, root, comm, stream), "ncclSend") }
    }
}

/** scatter's device part: [root] sends block r of [input] to rank r (its own by a device copy); the others receive theirs. */
internal fun NcclOp.scatterOnDevice(output: Tensor, input: Tensor?, root: Int, outer: Long) {
    if (rank == root) {
        val src = input!!
        val chunk = output.byteSize
        val blocks = if (outer == 1L) src.address else temp(src.byteSize).also { columnsToBlocks(it, src.address, chunk, outer) }
        group {
            for (r in 0 until worldSize) {
                val slot = blocks + r * chunk
                if (r == rank) {
                    cuda(runtime.memcpyAsync(output.address, slot, chunk, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, stream), "memcpyAsync")
                } else {
                    nccl(api.send(slot, chunk, BYTES, r, comm, stream), "ncclSend")
                }
            }
        }
    } else {
        group { nccl(api.recv(output.address, output.byteSize, BYTES, root, comm, stream), "ncclRecv") }
    }
}

/** allToAll's device part: one group of ncclSend/ncclRecv per peer, the own block by a device copy. */
internal fun NcclOp.allToAllOnDevice(out: Tensor, input: Tensor, outer: Long) {
    val chunk = input.byteSize / worldSize
    val sendBlocks = if (outer == 1L) input.address else temp(input.byteSize).also { columnsToBlocks(it, input.address, chunk, outer) }
    val recvBlocks = if (outer == 1L) out.address else temp(input.byteSize)
    group {
        for (r in 0 until worldSize) {
            if (r == rank) {
                cuda(runtime.memcpyAsync(recvBlocks + r * chunk, sendBlocks + r * chunk, chunk, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, stream), "memcpyAsync")
            } else {
                nccl(api.send(sendBlocks + r * chunk, chunk, BYTES, r, comm, stream), "ncclSend")
                nccl(api.recv(recvBlocks + r * chunk, chunk, BYTES, r, comm, stream), "ncclRecv")
            }
        }
    }
    if (outer != 1L) blocksToColumns(out.address, recvBlocks, chunk, outer)
}

/** Along the normalised dim [d]. */
internal fun NcclOp.issueAllGather(out: Tensor, input: Tensor, d: Int) {
    val outer = outerCount(input.shape, d)
    val type = moveTypeFor(input, ctx.libraryVersionCode)
    if (outer == 1L) {
        nccl(api.allGather(input.address, out.address, moveCount(input, type), type, comm, stream), "ncclAllGather")
    } else {
        val blocks = temp(out.byteSize)
        nccl(api.allGather(input.address, blocks, moveCount(input, type), type, comm, stream), "ncclAllGather")
        blocksToColumns(out.address, blocks, input.byteSize, outer)
    }
}

/**
 * allGatherV as PyTorch's ProcessGroupNCCL::allgather does for outputs of different sizes: one
 * out-of-place ncclBroadcast per rank (root r sends its input into rows `prefix[r]` of every
 * rank's output), coalesced into one group.
 */
internal fun NcclOp.issueAllGatherV(out: Tensor, input: Tensor, sizes: List<Int>) {
    val rowBytes = input.stride(0) * input.dtype.byteSize
    group {
        var at = 0L
        for (r in 0 until worldSize) {
            val bytes = sizes[r] * rowBytes
            // NCCL reads sendbuff on the root only; elsewhere it is given the receive slice
            // (an in-place broadcast there), so no rank passes a range its input does not hold.
            val send = if (r == rank) input.address else out.address + at
            if (bytes > 0) nccl(api.broadcast(send, out.address + at, bytes, BYTES, r, comm, stream), "ncclBroadcast")
            at += bytes
        }
    }
}

/**
 * reduceScatterV as PyTorch's ProcessGroupNCCL::reduce_scatter does for outputs of different
 * sizes: one out-of-place ncclReduce per rank (rows `prefix[r]` of every input reduced into
 * rank r's output), coalesced into one group. The receive buffer matters on the root only.
 */
internal fun NcclOp.issueReduceScatterV(out: Tensor, input: Tensor, sizes: List<Int>, red: Int) {
    val rowElements = input.stride(0)
    val esize = input.dtype.byteSize
    group {
        var at = 0L
        for (r in 0 until worldSize) {
            val count = sizes[r] * rowElements
            // recvbuff matters on the root only; elsewhere the send slice is given (an in-place
            // reduce there, which NCCL does not write on non-roots), so no rank passes a range its
            // output does not hold.
            val send = input.address + at * esize
            if (count > 0) nccl(api.reduce(send, if (r == rank) out.address else send, count, dt(input), red, r, comm, stream), "ncclReduce")
            at += count
        }
    }
}

/**
 * allToAllV as PyTorch's torch::cuda::nccl::all2all_single_unequal_split
 * (torch/csrc/cuda/nccl.cpp, behind ProcessGroupNCCL::alltoall_base with split sizes): one
 * group of ncclSend/ncclRecv per peer, skipping empty blocks; the block to and from this rank
 * is a device copy, as in [allToAll].
 */
internal fun NcclOp.issueAllToAllV(out: Tensor, input: Tensor, inputSplits: List<Int>, outputSplits: List<Int>) {
    val rowBytes = input.stride(0) * input.dtype.byteSize
    group {
        var sendAt = 0L
        var recvAt = 0L
        for (r in 0 until worldSize) {
            val sendBytes = inputSplits[r] * rowBytes
            val recvBytes = outputSplits[r] * rowBytes
            if (r == rank) {
                if (sendBytes > 0) cuda(runtime.memcpyAsync(out.address + recvAt, input.address + sendAt, sendBytes, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, stream), "memcpyAsync")
            } else {
                if (sendBytes > 0) nccl(api.send(input.address + sendAt, sendBytes, BYTES, r, comm, stream), "ncclSend")
                if (recvBytes > 0) nccl(api.recv(out.address + recvAt, recvBytes, BYTES, r, comm, stream), "ncclRecv")
            }
            sendAt += sendBytes
            recvAt += recvBytes
        }
    }
}

/** Along the normalised dim [d]. */
internal fun NcclOp.issueReduceScatter(out: Tensor, input: Tensor, red: Int, d: Int) {
    val outer = outerCount(input.shape, d)
    val src = if (outer == 1L) input.address else temp(input.byteSize).also { columnsToBlocks(it, input.address, out.byteSize, outer) }
    nccl(api.reduceScatter(src, out.address, out.numel, dt(input), red, comm, stream), "ncclReduceScatter")
}
