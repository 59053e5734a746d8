package dev.tpcomm.bench

import dev.tpcomm.DType
import dev.tpcomm.Float8
import dev.tpcomm.HalfPrecision
import dev.tpcomm.Tensor
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

/** Fast element access through a tensor's segment, for filling and checking benchmark buffers. */
internal object Elements {
    private val F32 = ValueLayout.JAVA_FLOAT_UNALIGNED
    private val F64 = ValueLayout.JAVA_DOUBLE_UNALIGNED
    private val I16 = ValueLayout.JAVA_SHORT_UNALIGNED
    private val I32 = ValueLayout.JAVA_INT_UNALIGNED
    private val I64 = ValueLayout.JAVA_LONG_UNALIGNED

    /** Element [i] of [s] (holding [dtype]) as a double. */
    fun get(s: MemorySegment, dtype: DType, i: Long): Double = when (dtype) {
        DType.Float32 -> s.get(F32, i * 4).toDouble()
        DType.Float64 -> s.get(F64, i * 8)
        DType.Float16 -> HalfPrecision.float16ToFloat(s.get(I16, i * 2)).toDouble()
        DType.BFloat16 -> HalfPrecision.bfloat16ToFloat(s.get(I16, i * 2)).toDouble()
        DType.Int8 -> s.get(ValueLayout.JAVA_BYTE, i).toDouble()
        DType.UInt8 -> (s.get(ValueLayout.JAVA_BYTE, i).toInt() and 0xFF).toDouble()
        DType.Int32 -> s.get(I32, i * 4).toDouble()
        DType.Int64 -> s.get(I64, i * 8).toDouble()
        DType.UInt32 -> (s.get(I32, i * 4).toLong() and 0xFFFF_FFFFL).toDouble()
        DType.UInt64 -> s.get(I64, i * 8).toULong().toDouble()
        DType.Float8E4M3, DType.Float8E5M2 -> Float8.toFloat(dtype, s.get(ValueLayout.JAVA_BYTE, i)).toDouble()
        DType.Int16 -> s.get(I16, i * 2).toDouble()
        DType.Bool -> if (s.get(ValueLayout.JAVA_BYTE, i).toInt() != 0) 1.0 else 0.0
    }

    /** Stores [v] (a small whole number or a value exact in [dtype]) at element [i] of [s]. */
    fun set(s: MemorySegment, dtype: DType, i: Long, v: Double) {
        when (dtype) {
            DType.Float32 -> s.set(F32, i * 4, v.toFloat())
            DType.Float64 -> s.set(F64, i * 8, v)
            DType.Float16 -> s.set(I16, i * 2, HalfPrecision.floatToFloat16(v.toFloat()))
            DType.BFloat16 -> s.set(I16, i * 2, HalfPrecision.floatToBFloat16(v.toFloat()))
            DType.Int8, DType.UInt8 -> s.set(ValueLayout.JAVA_BYTE, i, v.toLong().toByte())
            DType.Int32 -> s.set(I32, i * 4, v.toLong().toInt())
            DType.Int64, DType.UInt64 -> s.set(I64, i * 8, v.toLong())
            DType.UInt32 -> s.set(I32, i * 4, v.toLong().toInt())
            DType.Float8E4M3, DType.Float8E5M2 -> s.set(ValueLayout.JAVA_BYTE, i, Float8.fromDouble(dtype, v))
            DType.Int16 -> s.set(I16, i * 2, v.toLong().toShort())
            DType.Bool -> s.set(ValueLayout.JAVA_BYTE, i, if (v != 0.0) 1 else 0)
        }
    }

    /** Writes `value(i)` into every element `i` of [t]. */
    inline fun fill(t: Tensor, value: (Long) -> Double) {
        val s = t.segment
        val d = t.dtype
        for (i in 0 until t.numel) set(s, d, i, value(i))
    }

    /** Number of elements `i` of [t] differing from `expected(i)` by more than [tolerance] relative. */
    inline fun countWrong(t: Tensor, tolerance: Double, expected: (Long) -> Double): Long {
        val s = t.segment
        val d = t.dtype
        var bad = 0L
        for (i in 0 until t.numel) {
            val want = stored(d, expected(i))
            val got = get(s, d, i)
            if (got != want && !(tolerance > 0 && Math.abs(got - want) <= tolerance * Math.abs(want))) bad++
        }
        return bad
    }

    /** [v] as an element of [dtype] reads back: 0 or 1 for Bool, rounded (saturating) for FP8, else [v] (the patterns are exact there). */
    fun stored(dtype: DType, v: Double): Double = when (dtype) {
        DType.Bool -> if (v != 0.0) 1.0 else 0.0
        DType.Float8E4M3, DType.Float8E5M2 -> Float8.toFloat(dtype, Float8.fromDouble(dtype, v)).toDouble()
        else -> v
    }

    /** Relative tolerance of the check for [dtype]: 0 (exact) for integers, a few ulps for floats. */
    fun tolerance(dtype: DType): Double = when (dtype) {
        DType.Float32 -> 1e-6
        DType.Float64 -> 1e-12
        DType.Float16 -> 2e-3
        DType.BFloat16 -> 1e-2
        DType.Float8E4M3 -> 0.125 // one ulp: NCCL rounds FP8 after every step
        DType.Float8E5M2 -> 0.25
        else -> 0.0
    }
}
