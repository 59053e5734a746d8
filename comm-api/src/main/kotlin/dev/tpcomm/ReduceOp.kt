package dev.tpcomm

/**
 * Element-wise reduction applied by [Communicator.allReduce], [Communicator.reduce] and
 * [Communicator.reduceScatter].
 *
 * - [Sum], [Product], [Min], [Max] apply to every dtype. Integer arithmetic wraps around.
 * - [Avg] is the sum divided by the number of participating ranks. On floating-point types the
 *   division is exact IEEE division; on integer types it is the wrapped-around sum divided with
 *   truncation toward zero (as Kotlin's `/`), e.g. the average of 1 and 2 is 1 and of -1 and -2 is -1.
 * - [BitwiseAnd], [BitwiseOr], [BitwiseXor] apply to integer dtypes only; given a floating-point
 *   tensor every backend throws [IllegalArgumentException] before any data moves.
 */
public enum class ReduceOp {
    Sum, Product, Min, Max, Avg, BitwiseAnd, BitwiseOr, BitwiseXor;

    /** True for the three bitwise operations. */
    public val isBitwise: Boolean get() = this == BitwiseAnd || this == BitwiseOr || this == BitwiseXor

    /** Whether this operation is defined on [dtype]. */
    public fun supports(dtype: DType): Boolean = !isBitwise || dtype.isInteger
}
