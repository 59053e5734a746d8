package dev.tpcomm.engine

import dev.tpcomm.DType
import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.ReduceOp
import dev.tpcomm.coroutines.local.ReduceKernels
import java.lang.foreign.MemorySegment

/**
 * The in-process backend's reduction kernels for a backend that gathered every rank's elements
 * itself and reduces them on the host (the MPI backend's small all-reduce carried in its
 * consistency check's all-gather): every dtype and every [ReduceOp] but [ReduceOp.PreMulSum],
 * folded in rank order, so every rank that reduces the same gathered bytes gets the same bits, and
 * the same bits as the in-process backend.
 *
 * Thread-safe (the kernels' scratch is per thread); allocates one small array per call.
 */
@InternalTpcommApi
public object RankOrderReduction {
    /**
     * Reduces [count] elements of [dtype] from each of [inputs] (rank order, each at offset 0) with
     * [op] into [output] at offset 0. [output] may be one of [inputs]. [ReduceOp.Avg] divides the
     * sum by the number of inputs, as the in-process backend does.
     *
     * @throws IllegalArgumentException for [ReduceOp.PreMulSum] (its per-rank factors are not
     *   carried here) or a segment shorter than [count] elements.
     */
    @JvmStatic
    public fun reduce(dtype: DType, op: ReduceOp, inputs: Array<MemorySegment?>, output: MemorySegment, count: Long) {
        require(op !is ReduceOp.PreMulSum) { "RankOrderReduction does not take PreMulSum: scale each rank's input first and reduce with Sum" }
        val bytes = count * dtype.byteSize
        require(output.byteSize() >= bytes && inputs.all { it != null && it.byteSize() >= bytes }) {
            "RankOrderReduction: every segment must hold $count elements of $dtype"
        }
        ReduceKernels.reduce(dtype, op, inputs.size, inputs, 0, arrayOf(output), 1, 0, count)
    }
}
