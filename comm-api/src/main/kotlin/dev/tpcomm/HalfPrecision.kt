package dev.tpcomm

/**
 * Conversions between float32 and the two 16-bit floating-point formats, rounding to nearest even.
 *
 * Public because every backend that reduces Float16/BFloat16 on the host uses them; the bit
 * patterns are the ones stored in a [Tensor] of dtype [DType.Float16] or [DType.BFloat16].
 * Thread-safe (pure functions).
 */
public object HalfPrecision {
    /** IEEE binary16 bits to float32 (exact). */
    @JvmStatic
    public fun float16ToFloat(bits: Short): Float = java.lang.Float.float16ToFloat(bits)

    /** float32 to IEEE binary16 bits, rounding to nearest even; overflow gives infinity. */
    @JvmStatic
    public fun floatToFloat16(value: Float): Short = java.lang.Float.floatToFloat16(value)

    /** bfloat16 bits to float32 (exact). */
    @JvmStatic
    public fun bfloat16ToFloat(bits: Short): Float = java.lang.Float.intBitsToFloat((bits.toInt() and 0xFFFF) shl 16)

    /** float32 to bfloat16 bits, rounding to nearest even; NaN stays a quiet NaN. */
    @JvmStatic
    public fun floatToBFloat16(value: Float): Short {
        val bits = java.lang.Float.floatToRawIntBits(value)
        if (value.isNaN()) return ((bits ushr 16) or 0x40).toShort()
        val roundingBias = 0x7FFF + ((bits ushr 16) and 1)
        return ((bits + roundingBias) ushr 16).toShort()
    }
}
