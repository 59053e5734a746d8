package dev.tpcomm.gpu

import dev.tpcomm.engine.OperationCall
import dev.tpcomm.spi.CollectiveOp

// The mapping from the front's call to its device part: what each collective the front issues runs
// on the native thread, built on the caller's thread when the front issues it (the arguments read
// from the call then), run later as an extension of the operation ([NcclOp]); the device parts
// themselves are in DeviceLaunches, SplitOnDevice and ConsistencyCheck.
// Role: argument mapping only (it issues nothing). Thread-safety: stateless, any thread (the part it
// returns runs on the native thread). Lifetime: none; each part lives as long as its operation.

/** [block] as an operation's native part (a lambda with [NcclOp] as its receiver). */
private fun onDevice(block: NcclOp.() -> Any?): NcclOp.() -> Any? = block

/**
 * What [call] runs on the native thread (null as a result: the front returns the operation's own
 * value), issued with [ctx]; a split's or group's child made by [makeChild] with [commConfig].
 */
internal fun nativePart(
    call: OperationCall,
    ctx: NcclOpContext,
    commConfig: NcclCommConfig,
    makeChild: (comm: Long, stream: Long, rank: Int, worldSize: Int, world: Any) -> NcclCommunicator,
): NcclOp.() -> Any? {
    val resources = ctx.resources
    val libraryVersionCode = ctx.libraryVersionCode
    val rank = ctx.rank
    return when (call.op) {
        CollectiveOp.AllReduce -> {
            val t = call.input!!
            val op = call.reduceOp!!
            val red = redOp(op, t.dtype, ctx.worldSize)
            onDevice { withRedOp(op, t, red) { r -> nccl(api.allReduce(t.address, t.address, t.numel, dt(t), r, comm, stream), "ncclAllReduce") }; null }
        }
        CollectiveOp.Broadcast -> {
            val t = call.input!!
            val root = call.root
            onDevice {
                val type = moveTypeFor(t, libraryVersionCode)
                nccl(api.broadcast(t.address, t.address, moveCount(t, type), type, root, comm, stream), "ncclBroadcast")
                null
            }
        }
        CollectiveOp.Reduce -> {
            val t = call.input!!
            val op = call.reduceOp!!
            val red = redOp(op, t.dtype, ctx.worldSize)
            val root = call.root
            onDevice { withRedOp(op, t, red) { r -> nccl(api.reduce(t.address, t.address, t.numel, dt(t), r, root, comm, stream), "ncclReduce") }; null }
        }
        CollectiveOp.AllGather -> {
            val input = call.input!!
            val out = call.output!!
            val dim = call.dim
            onDevice { issueAllGather(out, input, dim); null }
        }
        CollectiveOp.ReduceScatter -> {
            val input = call.input!!
            val op = call.reduceOp!!
            val red = redOp(op, input.dtype, ctx.worldSize)
            val out = call.output!!
            val dim = call.dim
            onDevice { withRedOp(op, input, red) { r -> issueReduceScatter(out, input, r, dim) }; null }
        }
        CollectiveOp.Gather -> {
            val input = call.input!!
            val root = call.root
            val out = call.output
            val outer = outerCount(input.shape, call.dim)
            onDevice { gatherOnDevice(input, out, root, outer); null }
        }
        CollectiveOp.Scatter -> {
            val output = call.output!!
            val src = call.input
            val root = call.root
            val outer = outerCount(output.shape, call.dim)
            onDevice { scatterOnDevice(output, src, root, outer); null }
        }
        CollectiveOp.AllToAll -> {
            val input = call.input!!
            val out = call.output!!
            val outer = outerCount(input.shape, call.dim)
            onDevice { allToAllOnDevice(out, input, outer); null }
        }
        // The uneven collectives (sizes count rows along dim 0): NCCL has none; each is one group on the
        // stream, as PyTorch's ProcessGroupNCCL does for uneven sizes (see issueAllGatherV and the others).
        // Zero-row blocks issue nothing (every rank agrees on the sizes, so every rank skips the same calls).
        CollectiveOp.AllGatherV -> {
            val input = call.input!!
            val out = call.output!!
            val sizes = call.sizes!!
            onDevice { issueAllGatherV(out, input, sizes); null }
        }
        CollectiveOp.ReduceScatterV -> {
            val input = call.input!!
            val op = call.reduceOp!!
            val red = redOp(op, input.dtype, ctx.worldSize)
            val out = call.output!!
            val sizes = call.sizes!!
            onDevice { withRedOp(op, input, red) { r -> issueReduceScatterV(out, input, sizes, r) }; null }
        }
        CollectiveOp.AllToAllV -> {
            val input = call.input!!
            val out = call.output!!
            val inputSplits = call.sizes!!
            val outputSplits = call.outputSizes!!
            onDevice { issueAllToAllV(out, input, inputSplits, outputSplits); null }
        }
        CollectiveOp.Barrier -> {
            onDevice {
                val scratch = resources.barrierScratch(::cuda)
                nccl(api.allReduce(scratch, scratch, 1, NcclDataType.INT32, NcclRedOp.SUM, comm, stream), "ncclAllReduce")
                null
            }
        }
        CollectiveOp.Split -> {
            val extra = call.extra as IntArray
            val color = if (extra[0] == 0) null else extra[1]
            val key = extra[2]
            onDevice { splitOnDevice(color, key, commConfig, makeChild) }
        }
        CollectiveOp.Group -> {
            // As the interface's group: a split with color 0 for the members, in the order given.
            @Suppress("UNCHECKED_CAST")
            val position = (call.extra as List<Int>).indexOf(rank)
            onDevice { splitOnDevice(if (position >= 0) 0 else null, if (position >= 0) position else 0, commConfig, makeChild) }
        }
        else -> throw IllegalStateException("${call.op} is not a collective the front issues")
    }
}
