package dev.tpcomm

/**
 * Element type of a [Tensor].
 *
 * [byteSize] is the width of one element in bytes. Every backend carries every dtype;
 * which [ReduceOp]s apply to which dtype is given by [ReduceOp.supports].
 *
 * @property byteSize the width of one element in bytes.
 */
public enum class DType(public val byteSize: Int) {
    /** IEEE 754 binary32. */
    Float32(4),

    /** IEEE 754 binary64. */
    Float64(8),

    /** IEEE 754 binary16; reductions compute in float32 and round to nearest even. */
    Float16(2),

    /** bfloat16 (8-bit exponent, 7-bit mantissa); reductions compute in float32 and round to nearest even. */
    BFloat16(2),

    /** Signed 8-bit integer; arithmetic wraps around as in two's complement. */
    Int8(1),

    /** Unsigned 8-bit integer; arithmetic wraps around modulo 256. */
    UInt8(1),

    /** Signed 32-bit integer; arithmetic wraps around as in two's complement. */
    Int32(4),

    /** Signed 64-bit integer; arithmetic wraps around as in two's complement. */
    Int64(8);

    /** True for the four floating-point types. */
    public val isFloatingPoint: Boolean
        get() = this == Float32 || this == Float64 || this == Float16 || this == BFloat16

    /** True for the four integer types, the only ones the bitwise [ReduceOp]s accept. */
    public val isInteger: Boolean get() = !isFloatingPoint
}
