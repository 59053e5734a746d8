package dev.tpcomm.mpi

import dev.tpcomm.DType
import dev.tpcomm.Float8
import dev.tpcomm.HalfPrecision
import dev.tpcomm.ReduceOp
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

/**
 * Reductions the backend finishes on the host: the division of [ReduceOp.Avg] after an MPI sum,
 * and the reductions MPI cannot do: Float16, BFloat16 and the FP8 types (MPI has no such types):
 * the ranks' inputs are gathered and reduced here in float32, in rank order, rounded once (to
 * nearest even; FP8 saturating, see [Float8]), so every rank computes bit-identical results; and
 * 8/16-bit integer sums where the library saturates them. Pure functions over segments; thread-safe.
 */
internal object HostReduction {
    private val F32 = ValueLayout.JAVA_FLOAT_UNALIGNED
    private val F64 = ValueLayout.JAVA_DOUBLE_UNALIGNED
    private val I16 = ValueLayout.JAVA_SHORT_UNALIGNED
    private val I32 = ValueLayout.JAVA_INT_UNALIGNED
    private val I64 = ValueLayout.JAVA_LONG_UNALIGNED
    private val I8 = ValueLayout.JAVA_BYTE

    /** The floating-point dtypes narrower than float32, which MPI has no type for: reduced by [reduceBlocks]. */
    fun isNarrowFloat(dtype: DType): Boolean =
        dtype == DType.Float16 || dtype == DType.BFloat16 || dtype == DType.Float8E4M3 || dtype == DType.Float8E5M2

    /**
     * Divides the [count] elements of [segment] (a wrapped-around sum) by [n]: IEEE division for
     * floats, truncation toward zero for integers, unsigned division for the unsigned ones (as
     * [ReduceOp.Avg] says).
     */
    fun divide(segment: MemorySegment, dtype: DType, count: Long, n: Int) {
        if (n == 1) return
        when (dtype) {
            DType.Float32 -> for (i in 0 until count) segment.setAtIndex(F32, i, segment.getAtIndex(F32, i) / n)
            DType.Float64 -> for (i in 0 until count) segment.setAtIndex(F64, i, segment.getAtIndex(F64, i) / n)
            DType.Int8 -> for (i in 0 until count) segment.set(I8, i, (segment.get(I8, i).toInt() / n).toByte())
            DType.UInt8 -> for (i in 0 until count) segment.set(I8, i, ((segment.get(I8, i).toInt() and 0xFF) / n).toByte())
            DType.Int16 -> for (i in 0 until count) segment.setAtIndex(I16, i, (segment.getAtIndex(I16, i).toInt() / n).toShort())
            DType.Int32 -> for (i in 0 until count) segment.setAtIndex(I32, i, segment.getAtIndex(I32, i) / n)
            DType.UInt32 -> for (i in 0 until count) segment.setAtIndex(I32, i, Integer.divideUnsigned(segment.getAtIndex(I32, i), n))
            DType.Int64 -> for (i in 0 until count) segment.setAtIndex(I64, i, segment.getAtIndex(I64, i) / n)
            DType.UInt64 -> for (i in 0 until count) segment.setAtIndex(I64, i, java.lang.Long.divideUnsigned(segment.getAtIndex(I64, i), n.toLong()))
            DType.Float16, DType.BFloat16, DType.Float8E4M3, DType.Float8E5M2 -> for (i in 0 until count) {
                write(dtype, segment, i, read(dtype, segment, i) / n)
            }
            DType.Bool -> throw IllegalArgumentException("Avg is not defined on Bool")
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

    /** Element [i] of a narrow-float [dtype] in [segment], widened to float32 (exact). */
    private fun read(dtype: DType, segment: MemorySegment, i: Long): Float = when (dtype) {
        DType.Float8E4M3, DType.Float8E5M2 -> Float8.toFloat(dtype, segment.get(I8, i))
        else -> toFloat(dtype, segment.getAtIndex(I16, i))
    }

    /** Stores [value] at element [i] of a narrow-float [dtype], rounded once. */
    private fun write(dtype: DType, segment: MemorySegment, i: Long, value: Float) {
        when (dtype) {
            DType.Float8E4M3, DType.Float8E5M2 -> segment.set(I8, i, Float8.fromDouble(dtype, value.toDouble()))
            else -> segment.setAtIndex(I16, i, fromFloat(dtype, value))
        }
    }

    /**
     * Reduces [ranks] blocks of [count] elements laid out one after another in [blocks] (block r =
     * rank r's data) into [out]: narrow floats through [reduceHalves], 8/16-bit integers by a
     * wrapping sum (Avg: the wrapped sum divided with truncation toward zero).
     */
    fun reduceBlocks(blocks: MemorySegment, ranks: Int, count: Long, dtype: DType, op: ReduceOp, out: MemorySegment) {
        if (isNarrowFloat(dtype)) return reduceHalves(blocks, ranks, count, dtype, op, out)
        require((dtype == DType.Int8 || dtype == DType.UInt8 || dtype == DType.Int16) && (op == ReduceOp.Sum || op == ReduceOp.Avg)) {
            "reduceBlocks handles narrow floats and 8/16-bit integer sums, got $dtype $op"
        }
        if (dtype == DType.Int16) {
            for (i in 0 until count) {
                var acc = 0
                for (r in 0 until ranks) acc += blocks.getAtIndex(I16, r * count + i).toInt()
                var v = acc.toShort().toInt() // wrap around
                if (op == ReduceOp.Avg) v /= ranks
                out.setAtIndex(I16, i, v.toShort())
            }
            return
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
     * Reduces [ranks] blocks of [count] narrow floats (Float16, BFloat16, Float8E4M3, Float8E5M2)
     * laid out one after another in [blocks] (block r = rank r's data) with [op], in float32 in rank
     * order, and writes the result, rounded once, into [out]. [op] must be arithmetic (bitwise ops
     * are refused earlier). Min and Max propagate NaN.
     */
    fun reduceHalves(blocks: MemorySegment, ranks: Int, count: Long, dtype: DType, op: ReduceOp, out: MemorySegment) {
        require(isNarrowFloat(dtype)) { "reduceHalves takes Float16, BFloat16, Float8E4M3 or Float8E5M2, got $dtype" }
        for (i in 0 until count) {
            var acc = read(dtype, blocks, i)
            for (r in 1 until ranks) {
                val v = read(dtype, blocks, r * count + i)
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
            write(dtype, out, i, acc)
        }
    }
}
