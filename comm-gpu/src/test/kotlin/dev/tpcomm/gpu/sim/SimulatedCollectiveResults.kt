@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.gpu.sim

import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.NcclDataType
import dev.tpcomm.gpu.NcclRedOp
import dev.tpcomm.gpu.NcclResult
import dev.tpcomm.testkit.ReferenceReduction
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.util.concurrent.CountDownLatch
import java.util.concurrent.atomic.AtomicInteger

/** One rank's call; [op] is [NcclRedOp.NUM_OPS] for every PreMulSum operator (resolved at the enqueue), [factor] its scalar. */
internal class Contribution(val kind: String, val send: Long, val recv: Long, val count: Long, val dtype: Int, val op: Int, val root: Int, val factor: Double = 0.0)

/** The meeting of one collective's ranks: their calls, then two barriers (inputs read, outputs written). */
internal class Round(size: Int) {
    val inputs = arrayOfNulls<Contribution>(size)
    val arrived = CountDownLatch(size)
    val computed = CountDownLatch(size)
    val finished = AtomicInteger()
}

/**
 * What the simulated NCCL's collectives compute ([SimulatedNccl] meets the ranks and calls it):
 * every input read before any output is written, reductions through comm-testkit's
 * [ReferenceReduction] (FP8 through [Float8Reduction]), mismatched calls failing with
 * `ncclInvalidUsage`. Stateless but for [memory]; thread-safe.
 */
internal class SimulatedCollectiveResults(private val memory: SimulatedMemory) {
    /** Reads every input of [round] and returns the write of rank [me]'s output. */
    fun compute(round: Round, me: Int, size: Int): () -> Unit {
        val inputs = round.inputs.map { it!! }
        val mine = inputs[me]
        val bad = inputs.indices.filter { r ->
            val o = inputs[r]
            o.kind != mine.kind || o.count != mine.count || o.dtype != mine.dtype || o.op != mine.op || o.root != mine.root
        }
        if (bad.isNotEmpty()) {
            throw SimFault(
                NcclResult.INVALID_USAGE, CUDA_LAUNCH_FAILURE,
                "simulated NCCL: ranks $bad called ${bad.map { inputs[it].kind }} with other arguments than rank $me's ${mine.kind}",
            )
        }
        val width = elementSize(mine.dtype)
        val n = mine.count
        return when (mine.kind) {
            "allReduce" -> {
                val result = reduce(inputs.map { memory.resolve(it.send, n * width) }, mine.dtype, mine.op, n, inputs)
                ({ MemorySegment.copy(result, 0, memory.resolve(mine.recv, n * width), 0, n * width) })
            }
            "broadcast" -> {
                val result = copyOf(memory.resolve(inputs[mine.root].send, n * width))
                ({ MemorySegment.copy(result, 0, memory.resolve(mine.recv, n * width), 0, n * width) })
            }
            "reduce" -> {
                if (me != mine.root) ({}) else {
                    val result = reduce(inputs.map { memory.resolve(it.send, n * width) }, mine.dtype, mine.op, n, inputs)
                    ({ MemorySegment.copy(result, 0, memory.resolve(mine.recv, n * width), 0, n * width) })
                }
            }
            "allGather" -> {
                val parts = inputs.map { copyOf(memory.resolve(it.send, n * width)) }
                ({
                    val out = memory.resolve(mine.recv, n * width * size)
                    for (r in 0 until size) MemorySegment.copy(parts[r], 0, out, r * n * width, n * width)
                })
            }
            "reduceScatter" -> {
                val result = reduce(inputs.map { memory.resolve(it.send, n * width * size).asSlice(me * n * width, n * width) }, mine.dtype, mine.op, n, inputs)
                ({ MemorySegment.copy(result, 0, memory.resolve(mine.recv, n * width), 0, n * width) })
            }
            else -> throw SimFault(NcclResult.INTERNAL_ERROR, CUDA_LAUNCH_FAILURE, "unknown kind ${mine.kind}")
        }
    }

    fun copyOf(s: MemorySegment): MemorySegment = Arena.ofAuto().allocate(s.byteSize().coerceAtLeast(1)).also { MemorySegment.copy(s, 0, it, 0, s.byteSize()) }

    /**
     * The reduction through comm-testkit's [ReferenceReduction] (the project's one reference), except
     * FP8, which [Float8Reduction] reduces as NCCL's kernels do (pairwise through half precision).
     */
    fun reduce(inputs: List<MemorySegment>, dtype: Int, op: Int, n: Long, calls: List<Contribution>): MemorySegment {
        val dt = NcclDataType.toDType(dtype) ?: throw SimFault(NcclResult.INVALID_ARGUMENT, CUDA_INVALID_VALUE, "unsupported datatype $dtype")
        // FuncPreMulSum: each rank's input times its own scalar, then the sum (src/device/reduce_kernel.h).
        val ops = calls.map { c ->
            when (op) {
                NcclRedOp.SUM -> ReduceOp.Sum
                NcclRedOp.PROD -> ReduceOp.Product
                NcclRedOp.MAX -> ReduceOp.Max
                NcclRedOp.MIN -> ReduceOp.Min
                NcclRedOp.AVG -> ReduceOp.Avg
                NcclRedOp.NUM_OPS -> ReduceOp.PreMulSum(c.factor)
                else -> throw SimFault(NcclResult.INVALID_ARGUMENT, CUDA_INVALID_VALUE, "unsupported op $op")
            }
        }
        if (n == 0L) return Arena.ofAuto().allocate(1)
        if (dt == dev.tpcomm.DType.Float8E4M3 || dt == dev.tpcomm.DType.Float8E5M2) {
            return copyOf(Float8Reduction.reduce(ops.first(), inputs.map { Tensor.wrap(it.asSlice(0, n), dt, n.toInt()) }).segment)
        }
        val result = ReferenceReduction.expected(ops, inputs.map { Tensor.wrap(it.asSlice(0, n * dt.byteSize), dt, n.toInt()) })
        return copyOf(result.segment)
    }

    fun elementSize(dtype: Int): Long = when (dtype) {
        NcclDataType.UINT32 -> 4L
        NcclDataType.UINT64 -> 8L
        else -> (NcclDataType.toDType(dtype) ?: throw SimFault(NcclResult.INVALID_ARGUMENT, CUDA_INVALID_VALUE, "datatype $dtype")).byteSize.toLong()
    }
}
