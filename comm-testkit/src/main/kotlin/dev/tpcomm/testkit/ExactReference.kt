package dev.tpcomm.testkit

import dev.tpcomm.DType
import dev.tpcomm.Float8
import dev.tpcomm.HalfPrecision
import java.math.BigDecimal
import java.math.BigInteger
import java.math.RoundingMode

/**
 * The reference of the reproducible reductions, written independently of the library's kernel:
 * exact `BigDecimal` arithmetic, and one rounding to the dtype decided by exact comparisons (round
 * to nearest, ties to even; IEEE overflow to infinity, FP8 saturating). Works on the dtype's bit
 * patterns (as longs), so the comparison with a backend's result is bit for bit.
 */
internal object ExactReference {
    /** (precision with the implicit bit, smallest normal exponent, largest finite value) of a floating-point dtype. */
    private class Fmt(val p: Int, val emin: Int, val max: BigDecimal, val saturates: Boolean)

    private fun fmt(dtype: DType): Fmt = when (dtype) {
        DType.Float32 -> Fmt(24, -126, BigDecimal(Float.MAX_VALUE.toDouble()), false)
        DType.Float64 -> Fmt(53, -1022, BigDecimal(Double.MAX_VALUE), false)
        DType.Float16 -> Fmt(11, -14, BigDecimal(65504), false)
        DType.BFloat16 -> Fmt(8, -126, BigDecimal(HalfPrecision.bfloat16ToFloat(0x7F7F).toDouble()), false)
        DType.Float8E4M3 -> Fmt(4, -6, BigDecimal(448), true)
        DType.Float8E5M2 -> Fmt(3, -14, BigDecimal(57344), true)
        else -> throw IllegalArgumentException("$dtype is not a floating-point dtype")
    }

    /** The value of [bits] of [dtype] as a double (exact; NaN and infinities as such). */
    fun valueOf(dtype: DType, bits: Long): Double = when (dtype) {
        DType.Float32 -> java.lang.Float.intBitsToFloat(bits.toInt()).toDouble()
        DType.Float64 -> java.lang.Double.longBitsToDouble(bits)
        DType.Float16 -> HalfPrecision.float16ToFloat(bits.toShort()).toDouble()
        DType.BFloat16 -> HalfPrecision.bfloat16ToFloat(bits.toShort()).toDouble()
        DType.Float8E4M3, DType.Float8E5M2 -> Float8.toFloat(dtype, bits.toByte()).toDouble()
        else -> throw IllegalArgumentException("$dtype is not a floating-point dtype")
    }

    /** The bits of [value], a value of [dtype] (exactly representable, or an infinity). */
    fun bitsOf(dtype: DType, value: Double): Long = when (dtype) {
        DType.Float32 -> java.lang.Float.floatToRawIntBits(value.toFloat()).toLong() and 0xFFFFFFFFL
        DType.Float64 -> value.toRawBits()
        DType.Float16 -> HalfPrecision.floatToFloat16(value.toFloat()).toLong() and 0xFFFF
        DType.BFloat16 -> HalfPrecision.floatToBFloat16(value.toFloat()).toLong() and 0xFFFF
        DType.Float8E4M3, DType.Float8E5M2 -> Float8.fromDouble(dtype, value).toLong() and 0xFF
        else -> throw IllegalArgumentException("$dtype is not a floating-point dtype")
    }

    /** The canonical NaN the reproducible reductions write. */
    fun nanBits(dtype: DType): Long = when (dtype) {
        DType.Float32 -> 0x7FC00000L
        DType.Float64 -> java.lang.Double.doubleToRawLongBits(Double.NaN)
        DType.Float16 -> 0x7E00L
        DType.BFloat16 -> 0x7FC0L
        DType.Float8E4M3 -> 0x7FL
        DType.Float8E5M2 -> 0x7EL
        else -> throw IllegalArgumentException("$dtype is not a floating-point dtype")
    }

    /**
     * The bits of the correctly rounded sum ([divisor] 1) or average ([divisor] n) of [values]
     * (each a value of [dtype], as a double).
     */
    fun reduce(dtype: DType, values: List<Double>, divisor: Int): Long {
        if (values.any { it.isNaN() } || (values.any { it == Double.POSITIVE_INFINITY } && values.any { it == Double.NEGATIVE_INFINITY })) return nanBits(dtype)
        values.firstOrNull { it.isInfinite() }?.let { return bitsOf(dtype, it) }
        var exact = BigDecimal.ZERO
        for (v in values) exact = exact.add(BigDecimal(v))
        if (exact.signum() == 0) return bitsOf(dtype, if (values.all { it.toRawBits() == (-0.0).toRawBits() }) -0.0 else 0.0)
        return bitsOf(dtype, round(dtype, exact, divisor))
    }

    /** [x] (times [factor]) rounded once to [dtype]: the per-rank product of PreMulSum. */
    fun product(dtype: DType, x: Double, factor: Double): Double {
        if (!x.isFinite()) return x * factor
        val exact = BigDecimal(x).multiply(BigDecimal(factor))
        if (exact.signum() == 0) return if ((x < 0 || x.toRawBits() == (-0.0).toRawBits()) != (factor < 0)) -0.0 else 0.0
        return round(dtype, exact, 1)
    }

    /** `exact / divisor` rounded to nearest even in [dtype], as a double (an infinity past the largest finite value, or that value for FP8). */
    fun round(dtype: DType, exact: BigDecimal, divisor: Int): Double {
        val f = fmt(dtype)
        val negative = exact.signum() < 0
        val a = exact.abs()
        val n = BigDecimal(divisor)
        // e = floor(log2(a / n)), found from a double guess and fixed with exact comparisons.
        var e = Math.getExponent(a.divide(n, java.math.MathContext(30)).toDouble())
        while (a.compareTo(pow2(e).multiply(n)) < 0) e--
        while (a.compareTo(pow2(e + 1).multiply(n)) >= 0) e++
        val q = maxOf(e, f.emin) - f.p + 1
        // a / (n 2^q) = t + r / (n 2^q) with integer t.
        val scaledTimesN = a.divide(pow2(q)) // exact: a power of two
        val t = scaledTimesN.divide(n, 0, RoundingMode.FLOOR)
        val twiceRem = scaledTimesN.subtract(t.multiply(n)).multiply(BigDecimal(2))
        val c = twiceRem.compareTo(n)
        val up = c > 0 || (c == 0 && t.toBigIntegerExact().testBit(0))
        val rounded = (if (up) t.add(BigDecimal.ONE) else t).multiply(pow2(q))
        val v = if (rounded.compareTo(f.max) > 0) {
            if (f.saturates) f.max.toDouble() else Double.POSITIVE_INFINITY
        } else {
            rounded.toDouble() // exact: a value of the dtype
        }
        return if (negative) -v else v
    }

    private fun pow2(e: Int): BigDecimal = if (e >= 0) BigDecimal(BigInteger.ONE.shiftLeft(e)) else BigDecimal.ONE.divide(BigDecimal(BigInteger.ONE.shiftLeft(-e)))
}
