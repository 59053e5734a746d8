package dev.tpcomm

/**
 * Conversions between the two 8-bit floating-point formats ([DType.Float8E4M3], [DType.Float8E5M2])
 * and float32/float64: the bit patterns stored in a [Tensor] of those dtypes.
 *
 * They follow CUDA's `cuda_fp8.hpp` (`__nv_cvt_double_to_fp8`, `__nv_cvt_fp8_to_halfraw`) with
 * `__NV_SATFINITE`, the mode of the `__nv_fp8_e4m3`/`__nv_fp8_e5m2` constructors that NCCL's
 * reductions use (NVIDIA/nccl `src/device/reduce_kernel.h`, `SPECIALIZE_REDUCE(FuncSum, __nv_fp8_e4m3, ...)`):
 *
 * - rounding is to nearest, ties to even, with subnormals;
 * - a magnitude above the largest finite value (448 for E4M3, 57344 for E5M2) **saturates** to it,
 *   keeping the sign; for E5M2 that includes the infinities (E4M3 has none);
 * - NaN stays NaN (E4M3 `0x7F`, E5M2 a quiet NaN; the sign is kept, as CUDA does).
 *
 * Widening ([e4m3ToFloat], [e5m2ToFloat]) is exact. Public because every backend that reduces FP8
 * on the host uses them. Thread-safe (pure functions).
 */
public object Float8 {
    /** Largest finite E4M3 value, 448 (`0x7E`). */
    public const val E4M3_MAX: Float = 448f

    /** Largest finite E5M2 value, 57344 (`0x7B`). */
    public const val E5M2_MAX: Float = 57344f

    /** E4M3 (OCP "FN": no infinities, NaN `S.1111.111`) bits to float32 (exact). */
    @JvmStatic
    public fun e4m3ToFloat(bits: Byte): Float = decode(bits, MANT_E4M3, BIAS_E4M3, finite = true)

    /** E5M2 (IEEE-like: infinities and NaN at exponent 31) bits to float32 (exact). */
    @JvmStatic
    public fun e5m2ToFloat(bits: Byte): Float = decode(bits, MANT_E5M2, BIAS_E5M2, finite = false)

    /** [value] to E4M3 bits, rounding to nearest even and saturating to ±448 (`__NV_SATFINITE`). */
    @JvmStatic
    public fun toE4M3(value: Double): Byte = encode(value, MANT_E4M3, BIAS_E4M3, E4M3_MAX.toDouble(), 0x7E)

    /** [value] to E4M3 bits (see the Double overload; a Float widens exactly). */
    @JvmStatic
    public fun toE4M3(value: Float): Byte = toE4M3(value.toDouble())

    /** [value] to E5M2 bits, rounding to nearest even and saturating to ±57344, infinities included (`__NV_SATFINITE`). */
    @JvmStatic
    public fun toE5M2(value: Double): Byte = encode(value, MANT_E5M2, BIAS_E5M2, E5M2_MAX.toDouble(), 0x7B)

    /** [value] to E5M2 bits (see the Double overload; a Float widens exactly). */
    @JvmStatic
    public fun toE5M2(value: Float): Byte = toE5M2(value.toDouble())

    /** [bits] of FP8 [dtype] (Float8E4M3 or Float8E5M2) to float32. */
    @JvmStatic
    public fun toFloat(dtype: DType, bits: Byte): Float = when (dtype) {
        DType.Float8E4M3 -> e4m3ToFloat(bits)
        DType.Float8E5M2 -> e5m2ToFloat(bits)
        else -> throw IllegalArgumentException("Float8.toFloat takes Float8E4M3 or Float8E5M2, got $dtype")
    }

    /** [value] to the bits of FP8 [dtype] (Float8E4M3 or Float8E5M2), rounding and saturating as above. */
    @JvmStatic
    public fun fromDouble(dtype: DType, value: Double): Byte = when (dtype) {
        DType.Float8E4M3 -> toE4M3(value)
        DType.Float8E5M2 -> toE5M2(value)
        else -> throw IllegalArgumentException("Float8.fromDouble takes Float8E4M3 or Float8E5M2, got $dtype")
    }

    private const val MANT_E4M3 = 3
    private const val BIAS_E4M3 = 7
    private const val MANT_E5M2 = 2
    private const val BIAS_E5M2 = 15

    private fun decode(bits: Byte, mant: Int, bias: Int, finite: Boolean): Float {
        val b = bits.toInt() and 0xFF
        val negative = b and 0x80 != 0
        val exponent = (b and 0x7F) ushr mant
        val mantissa = b and ((1 shl mant) - 1)
        val maxExponent = (1 shl (7 - mant)) - 1
        val magnitude = when {
            finite && exponent == maxExponent && mantissa == (1 shl mant) - 1 -> return Float.NaN
            !finite && exponent == maxExponent -> if (mantissa == 0) Float.POSITIVE_INFINITY else return Float.NaN
            exponent == 0 -> Math.scalb(mantissa.toFloat(), 1 - bias - mant)
            else -> Math.scalb(((1 shl mant) + mantissa).toFloat(), exponent - bias - mant)
        }
        return if (negative) -magnitude else magnitude
    }

    private fun encode(value: Double, mant: Int, bias: Int, maxFinite: Double, maxCode: Int): Byte {
        val raw = value.toRawBits()
        val sign = if (raw < 0) 0x80 else 0
        if (value.isNaN()) {
            // cuda_fp8.hpp: E4M3 NaN is 0x7F; E5M2 keeps the top two mantissa bits of the NaN, made quiet (0x7E | m).
            return (sign or if (mant == MANT_E4M3) 0x7F else 0x7E or ((raw ushr 50).toInt() and 3)).toByte()
        }
        val a = Math.abs(value)
        if (a >= maxFinite) return (sign or maxCode).toByte() // saturate (infinities too)
        val minExponent = 1 - bias
        val e = maxOf(Math.getExponent(a), minExponent) // subnormals share the smallest normal's spacing
        val q = Math.rint(Math.scalb(a, mant - e)).toInt() // exact scaling; rint rounds ties to even
        val code = when {
            q >= 2 shl mant -> (e + 1 + bias) shl mant // rounded up into the next binade (mantissa 0)
            q >= 1 shl mant -> ((e + bias) shl mant) or (q - (1 shl mant))
            else -> q // subnormal (exponent field 0), or zero
        }
        return (sign or code).toByte()
    }
}
