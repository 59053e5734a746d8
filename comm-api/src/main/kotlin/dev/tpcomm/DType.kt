package dev.tpcomm

/**
 * Element type of a [Tensor].
 *
 * [byteSize] is the width of one element in bytes. Every backend carries every dtype in the
 * data-movement collectives (broadcast, all-gather, scatter, all-to-all, send/recv: bytes are bytes).
 * Which [ReduceOp]s are defined on which dtype is given by [ReduceOp.supports]; a backend whose
 * native library cannot reduce a dtype (NCCL has no int16, FP8 needs NCCL 2.24) refuses the
 * reduction with [IllegalArgumentException] before any data moves, saying what to convert to.
 *
 * The entries' order (their ordinals) is part of the wire format of the consistency check
 * (`CollectiveSignature`): new entries are only ever appended.
 *
 * **Classification.** [isFloatingPoint] holds for the six floating-point types; [isInteger] for the
 * seven integer types. [Bool] is neither: it is a logical type (as `torch.bool`, which is neither
 * `is_floating_point` nor integral), on which [ReduceOp.Sum] and [ReduceOp.Max] are a logical or,
 * [ReduceOp.Product] and [ReduceOp.Min] a logical and, the bitwise ops the logical ones, and
 * [ReduceOp.Avg] is not defined.
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
    Int64(8),

    /**
     * Unsigned 32-bit integer: arithmetic wraps around modulo 2^32; Min, Max and Avg compare and
     * divide unsigned (`0xFFFFFFFF` is the largest value). [Tensor.getLong] reads 0..2^32-1.
     */
    UInt32(4),

    /**
     * Unsigned 64-bit integer: arithmetic wraps around modulo 2^64; Min, Max and Avg compare and
     * divide unsigned. [Tensor.getLong] returns the bits, so values of 2^63 and above read as
     * negative Longs (as `ULong.toLong()`); [Tensor.getDouble] reads the unsigned value.
     */
    UInt64(8),

    /**
     * 8-bit float E4M3 in the OCP "FN" form (`__nv_fp8_e4m3`, `torch.float8_e4m3fn`): 4 exponent
     * bits (bias 7), 3 mantissa bits, no infinities, NaN `0x7F`/`0xFF`, largest finite value 448.
     * Conversions round to nearest even and **saturate** to ±448 (CUDA's `__NV_SATFINITE`, the
     * rounding NCCL's reductions use; see [Float8]). Reductions compute in float32 and round once.
     */
    Float8E4M3(1),

    /**
     * 8-bit float E5M2 (`__nv_fp8_e5m2`, `torch.float8_e5m2`): 5 exponent bits (bias 15), 2 mantissa
     * bits, infinities and NaN as in IEEE 754, largest finite value 57344. Conversions round to
     * nearest even and **saturate** to ±57344, infinities included (`__NV_SATFINITE`; see [Float8]).
     * Reductions compute in float32 and round once.
     */
    Float8E5M2(1),

    /** Signed 16-bit integer; arithmetic wraps around as in two's complement. */
    Int16(2),

    /**
     * Boolean, one byte per element: 0 is false, any other byte true; tpcomm writes 0 and 1
     * (`torch.bool`'s layout). Sum and Max are a logical or, Product and Min a logical and, the
     * bitwise ops the logical ones; Avg is refused. Neither [isFloatingPoint] nor [isInteger].
     */
    Bool(1);

    /** True for the six floating-point types (Float32, Float64, Float16, BFloat16, Float8E4M3, Float8E5M2). */
    public val isFloatingPoint: Boolean
        get() = this == Float32 || this == Float64 || this == Float16 || this == BFloat16 ||
            this == Float8E4M3 || this == Float8E5M2

    /**
     * True for the seven integer types (Int8, UInt8, Int16, Int32, UInt32, Int64, UInt64); false for
     * the floating-point types and for [Bool]. The bitwise [ReduceOp]s accept these and [Bool].
     */
    public val isInteger: Boolean get() = !isFloatingPoint && this != Bool

    /** True for the integer types whose values are unsigned (UInt8, UInt32, UInt64): Min, Max and Avg compare and divide unsigned. */
    public val isUnsigned: Boolean get() = this == UInt8 || this == UInt32 || this == UInt64
}
