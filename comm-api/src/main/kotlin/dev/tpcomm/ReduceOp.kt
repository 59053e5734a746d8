package dev.tpcomm

/**
 * Element-wise reduction applied by [Communicator.allReduce], [Communicator.reduce] and
 * [Communicator.reduceScatter].
 *
 * - [Sum], [Product], [Min], [Max] apply to every dtype. Integer arithmetic wraps around.
 * - [Avg] is the sum divided by the number of participating ranks. On floating-point types the
 *   division is exact IEEE division; on integer types it is the wrapped-around sum divided with
 *   truncation toward zero (as Kotlin's `/`), e.g. the average of 1 and 2 is 1 and of -1 and -2 is -1.
 * - [BitwiseAnd], [BitwiseOr], [BitwiseXor] apply to integer dtypes and [DType.Bool]; given a
 *   floating-point tensor every backend throws [IllegalArgumentException] before any data moves.
 * - Unsigned dtypes (UInt8, UInt32, UInt64) compare unsigned in [Min]/[Max] and divide unsigned in [Avg].
 * - FP8 ([DType.Float8E4M3], [DType.Float8E5M2]) reduces like Float16: in float32, rounded once,
 *   saturating to the largest finite value (see [Float8]) where tpcomm reduces; NCCL reduces FP8
 *   pairwise in half precision, rounding to FP8 after each step.
 * - [DType.Bool] (as PyTorch's NCCL backend does): [Sum] and [Max] are a logical or, [Product] and
 *   [Min] a logical and, the bitwise ops the logical ones; [Avg] is not defined on Bool and is
 *   refused with [IllegalArgumentException].
 *
 * NaN under [Max] and [Min] **propagates**: the rule is IEEE 754-2019 `maximum`/`minimum` (as
 * PyTorch's `torch.maximum`/`torch.minimum` and Java's `Math.max`/`Math.min`): if any rank's value
 * at an index is NaN, the result there is NaN, whichever rank holds it; signed zeros order as
 * `-0 < +0`. The local backend keeps this rule for Float16, BFloat16, Float32 and Float64 (scalar
 * and Vector API kernels alike). Where a native library reduces on its native path (MPI, NCCL,
 * RCCL), the library decides and tpcomm does not rewrite its answer: `MPI_MAX`/`MPI_MIN` leave NaN
 * unspecified (Open MPI and MPICH have been seen to return the non-NaN operand depending on the
 * rank order, e.g. `[NaN, 1]` on one and `[1, NaN]` on the other), and NCCL/RCCL use the device's
 * own max/min. Programs that must see NaN on those backends should check for NaN before reducing.
 */
public enum class ReduceOp {
    Sum, Product, Min, Max, Avg, BitwiseAnd, BitwiseOr, BitwiseXor;

    /** True for the three bitwise operations. */
    public val isBitwise: Boolean get() = this == BitwiseAnd || this == BitwiseOr || this == BitwiseXor

    /** Whether this operation is defined on [dtype]: bitwise ops on integers and Bool only, Avg on all but Bool. */
    public fun supports(dtype: DType): Boolean = when {
        isBitwise -> dtype.isInteger || dtype == DType.Bool
        this == Avg -> dtype != DType.Bool
        else -> true
    }
}
