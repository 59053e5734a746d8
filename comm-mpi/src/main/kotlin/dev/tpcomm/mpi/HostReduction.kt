package dev.tpcomm.mpi

import dev.tpcomm.DType
import dev.tpcomm.HalfPrecision
import dev.tpcomm.ReduceOp
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

/**
 * Reductions the backend finishes on the host: the division of [ReduceOp.Avg] after an MPI sum,
 * and Float16/BFloat16 reductions, which MPI cannot do (it has no such types): the ranks' inputs
 * are gathered and reduced here in float32, in rank order, rounded once to nearest even, so
 * every rank computes bit-identical results. Pure functions over segments; thread-safe.
 */
internal object HostReduction {
    private val F32 = ValueLayout.JAVA_FLOAT_UNALIGNED
    private val F64 = ValueLayout.JAVA_DOUBLE_UNALIGNED
    private val I16 = ValueLayout.JAVA_SHORT_UNALIGNED
    private val I32 = ValueLayout.JAVA_INT_UNALIGNED
    private val I64 = ValueLayout.JAVA_LONG_UNALIGNED
    private val I8 = ValueLayout.JAVA_BYTE

    /**
     * Divides the [count] elements of [segment] (a wrapped-around sum) by [n]: IEEE division for
     * floats, truncation toward zero for integers (as [ReduceOp.Avg] says).
     */
    fun divide(segment: MemorySegment, dtype: DType, count: Long, n: Int) {
        if (n == 1) return
        when (dtype) {
            DType.Float32 -> for (i in 0 until count) segment.setAtIndex(F32, i, segment.getAtIndex(F32, i) / n)
            DType.Float64 -> for (i in 0 until count) segment.setAtIndex(F64, i, segment.getAtIndex(F64, i) / n)
            DType.Int8 -> for (i in 0 until count) segment.set(I8, i, (segment.get(I8, i).toInt() / n).toByte())
            DType.UInt8 -> for (i in 0 until count) segment.set(I8, i, ((segment.get(I8, i).toInt() and 0xFF) / n).toByte())
            DType.Int32 -> for (i in 0 until count) segment.setAtIndex(I32, i, segment.getAtIndex(I32, i) / n)
            DType.Int64 -> for (i in 0 until count) segment.setAtIndex(I64, i, segment.getAtIndex(I64, i) / n)
            DType.Float16, DType.BFloat16 -> for (i in 0 until count) {
                segment.setAtIndex(I16, i, fromFloat(dtype, toFloat(dtype, segment.getAtIndex(I16, i)) / n))
            }
        }
    }

    /**
     * [ReduceOp.PreMulSum]'s local step: writes [count] elements of [src] times [factor] (already in
     * the dtype, [ReduceOp.PreMulSum.factorIn]), each product rounded to [dtype] as NCCL's
     * `Apply_PreOp<FuncPreMulSum<T>>` does (NVIDIA/nccl `src/device/reduce_kernel.h`), into [dst];
     * [dst] may be [src] (in place). MPI has no scaled sum: the backend then sums with `MPI_SUM`
     * (or the host reduction of 16-bit floats).
     */
    fun scale(src: MemorySegment, dst: MemorySegment, dtype: DType, count: Long, factor: Double) {
        when (dtype) {
            DType.Float32 -> {
                val f = factor.toFloat()
                for (i in 0 until count) dst.setAtIndex(F32, i, src.getAtIndex(F32, i) * f)
            }
            DType.Float64 -> for (i in 0 until count) dst.setAtIndex(F64, i, src.getAtIndex(F64, i) * factor)
            DType.Float16, DType.BFloat16 -> {
                val f = factor.toFloat()
                for (i in 0 until count) dst.setAtIndex(I16, i, fromFloat(dtype, toFloat(dtype, src.getAtIndex(I16, i)) * f))
            }
            else -> throw IllegalArgumentException("PreMulSum is not defined on $dtype")
        }
    }

    fun toFloat(dtype: DType, bits: Short): Float =
        if (dtype == DType.Float16) HalfPrecision.float16ToFloat(bits) else HalfPrecision.bfloat16ToFloat(bits)

    fun fromFloat(dtype: DType, value: Float): Short =
        if (dtype == DType.Float16) HalfPrecision.floatToFloat16(value) else HalfPrecision.floatToBFloat16(value)

    /**
     * Reduces [ranks] blocks of [count] elements laid out one after another in [blocks] (block r =
     * rank r's data) into [out]: 16-bit floats through [reduceHalves], 8-bit integers by a
     * wrapping sum (Avg: the wrapped sum divided with truncation toward zero).
     */
    fun reduceBlocks(blocks: MemorySegment, ranks: Int, count: Long, dtype: DType, op: ReduceOp, out: MemorySegment) {
        if (dtype == DType.Float16 || dtype == DType.BFloat16) return reduceHalves(blocks, ranks, count, dtype, op, out)
        require((dtype == DType.Int8 || dtype == DType.UInt8) && (op == ReduceOp.Sum || op == ReduceOp.Avg)) {
            "reduceBlocks handles 16-bit floats and 8-bit integer sums, got $dtype $op"
        }
        for (i in 0 until count) {
            var acc = 0
            for (r in 0 until ranks) acc += blocks.get(I8, r * count + i).toInt()
            var v = acc.toByte().toInt() // wrap around
            if (op == ReduceOp.Avg) v = if (dtype == DType.UInt8) (v and 0xFF) / ranks else v / ranks
            out.set(I8, i, v.toByte())
        }
    }

    /**
     * Reduces [ranks] blocks of [count] 16-bit floats laid out one after another in [blocks]
     * (block r = rank r's data) with [op], in float32 in rank order, and writes the rounded
     * result into [out]. [op] must be arithmetic (bitwise ops are refused earlier).
     */
    fun reduceHalves(blocks: MemorySegment, ranks: Int, count: Long, dtype: DType, op: ReduceOp, out: MemorySegment) {
        require(dtype == DType.Float16 || dtype == DType.BFloat16) { "reduceHalves takes Float16 or BFloat16, got $dtype" }
        for (i in 0 until count) {
            var acc = toFloat(dtype, blocks.getAtIndex(I16, i))
            for (r in 1 until ranks) {
                val v = toFloat(dtype, blocks.getAtIndex(I16, r * count + i))
                acc = when (op) {
                    // PreMulSum's blocks were scaled by each rank before the gather ([scale]).
                    ReduceOp.Sum, ReduceOp.Avg, is ReduceOp.PreMulSum -> acc + v
                    ReduceOp.Product -> acc * v
                    ReduceOp.Min -> if (acc.isNaN() || v.isNaN()) Float.NaN else minOf(acc, v)
                    ReduceOp.Max -> if (acc.isNaN() || v.isNaN()) Float.NaN else maxOf(acc, v)
                    else -> throw IllegalArgumentException("$op is not defined on $dtype")
                }
            }
            if (op == ReduceOp.Avg) acc /= ranks
            out.setAtIndex(I16, i, fromFloat(dtype, acc))
        }
    }
}
