package dev.tpcomm

/**
 * Element-wise reduction applied by [Communicator.allReduce], [Communicator.reduce],
 * [Communicator.reduceScatter] and [Communicator.reduceScatterV] (and everything built on them).
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
 * - [PreMulSum]`(factor)` is a scaled sum (NCCL's `ncclRedOpCreatePreMulSum`): each rank multiplies
 *   its own input by its own factor, then the products are summed, e.g.
 *   `comm.allReduce(grad, ReduceOp.PreMulSum(1.0 / comm.worldSize))` averages gradients in one pass.
 *   Float32, Float64, Float16 and BFloat16 only (see [PreMulSum]).
 *
 * The eight operations without a parameter are objects, written `ReduceOp.Sum` from Kotlin and
 * from Java alike (Java reads the static field `ReduceOp.Sum`, which holds the same object);
 * [PreMulSum] is a class, `ReduceOp.PreMulSum(0.25)` in Kotlin and `new ReduceOp.PreMulSum(0.25)`
 * in Java. A `when` over a `ReduceOp` is exhaustive with the eight objects and
 * `is ReduceOp.PreMulSum`. Every instance is immutable and thread-safe.
 *
 * `ReduceOp` is a sealed interface whose members have no default bodies: the JVM then never
 * initializes it as part of initializing one of the objects (JLS 12.4.1), so its static fields for
 * Java are filled from the objects whichever is touched first. (As a sealed class it would be the
 * objects' superclass, and an object initialized first would leave the field null.)
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
public sealed interface ReduceOp {
    /**
     * The operation's name without its parameter (`Sum`, ..., `PreMulSum`): what collective
     * signatures compare across ranks and what the flight recorder records.
     */
    public val name: String

    /**
     * Position of this operation in the signature encoding: the eight parameterless operations in
     * [entries] order (0 to 7), then [PreMulSum] (8), whatever its factor.
     */
    public val ordinal: Int

    /** True for the three bitwise operations. */
    public val isBitwise: Boolean

    /**
     * Whether this operation is defined on [dtype]: the bitwise ones on integer dtypes and Bool,
     * [Avg] on every dtype but Bool, [PreMulSum] on Float32, Float64, Float16 and BFloat16, the
     * others on every dtype.
     */
    public fun supports(dtype: DType): Boolean

    /** The element-wise sum. */
    public data object Sum : ReduceOp {
        override val name: String get() = "Sum"
        override val ordinal: Int get() = 0
        override val isBitwise: Boolean get() = false
        override fun supports(dtype: DType): Boolean = true
    }

    /** The element-wise product. */
    public data object Product : ReduceOp {
        override val name: String get() = "Product"
        override val ordinal: Int get() = 1
        override val isBitwise: Boolean get() = false
        override fun supports(dtype: DType): Boolean = true
    }

    /** The element-wise minimum (NaN propagates, see [ReduceOp]). */
    public data object Min : ReduceOp {
        override val name: String get() = "Min"
        override val ordinal: Int get() = 2
        override val isBitwise: Boolean get() = false
        override fun supports(dtype: DType): Boolean = true
    }

    /** The element-wise maximum (NaN propagates, see [ReduceOp]). */
    public data object Max : ReduceOp {
        override val name: String get() = "Max"
        override val ordinal: Int get() = 3
        override val isBitwise: Boolean get() = false
        override fun supports(dtype: DType): Boolean = true
    }

    /** The sum divided by the number of ranks (see [ReduceOp] for integers). */
    public data object Avg : ReduceOp {
        override val name: String get() = "Avg"
        override val ordinal: Int get() = 4
        override val isBitwise: Boolean get() = false
        override fun supports(dtype: DType): Boolean = dtype != DType.Bool
    }

    /** Bitwise and; integer dtypes and Bool (the logical one). */
    public data object BitwiseAnd : ReduceOp {
        override val name: String get() = "BitwiseAnd"
        override val ordinal: Int get() = 5
        override val isBitwise: Boolean get() = true
        override fun supports(dtype: DType): Boolean = dtype.isInteger || dtype == DType.Bool
    }

    /** Bitwise or; integer dtypes and Bool (the logical one). */
    public data object BitwiseOr : ReduceOp {
        override val name: String get() = "BitwiseOr"
        override val ordinal: Int get() = 6
        override val isBitwise: Boolean get() = true
        override fun supports(dtype: DType): Boolean = dtype.isInteger || dtype == DType.Bool
    }

    /** Bitwise exclusive or; integer dtypes and Bool (the logical one). */
    public data object BitwiseXor : ReduceOp {
        override val name: String get() = "BitwiseXor"
        override val ordinal: Int get() = 7
        override val isBitwise: Boolean get() = true
        override fun supports(dtype: DType): Boolean = dtype.isInteger || dtype == DType.Bool
    }

    /**
     * The scaled sum `Σ_r factor_r · x_r`: every rank multiplies its own input by its own [factor]
     * before the inputs are summed (NCCL's `ncclRedOpCreatePreMulSum`; PyTorch's
     * `ReduceOp.PREMUL_SUM`). `PreMulSum(1.0 / worldSize)` averages in one pass.
     *
     * **The factor is per rank.** NCCL creates the operator on each rank from that rank's scalar
     * alone, with no communication (NVIDIA/nccl `src/enqueue.cc` `ncclRedOpCreatePreMulSum`), so
     * ranks may pass different factors; the collective signature compares only that every rank
     * uses PreMulSum, never the factors.
     *
     * **Precision, as NCCL's `FuncPreMulSum`** (NVIDIA/nccl `src/device/reduce_kernel.h`): the factor
     * is first rounded to the tensor's dtype (NCCL keeps the scalar in the dtype; PyTorch's
     * `unpackPreMulSum` converts the double with `T(factor)`), each product is rounded to the dtype
     * (`Apply_PreOp<FuncPreMulSum<T>>`: `x * scalar` in `T`, `__hmul` for half and bfloat16), then
     * the products are summed as [Sum] sums (Float16/BFloat16 in float32 rounded once on the host
     * backends; NCCL sums in the dtype).
     *
     * **Dtypes.** Float32, Float64, Float16 and BFloat16 only: NCCL also has integer PreMulSum with an integer scalar, but
     * PyTorch refuses it ("PreMulSum Data type must be half, float, or double", `getNcclReduceOp`)
     * and a fractional factor has no integer meaning; given any other tensor (integer, Bool, FP8) every backend throws
     * [IllegalArgumentException] before any data moves.
     *
     * Equal when the factors are equal. Immutable and thread-safe.
     *
     * @property factor this rank's multiplier; finite.
     * @throws IllegalArgumentException when [factor] is NaN or infinite.
     */
    public class PreMulSum(public val factor: Double) : ReduceOp {
        init {
            require(factor.isFinite()) { "ReduceOp.PreMulSum: factor $factor is not finite; pass a finite multiplier such as 1.0 / worldSize" }
        }

        override val name: String get() = "PreMulSum"
        override val ordinal: Int get() = 8
        override val isBitwise: Boolean get() = false

        /**
         * True for Float32, Float64, Float16 and BFloat16: PyTorch accepts "half, float, or double"
         * (`getNcclReduceOp`); FP8 has no PreMulSum here (a factor rounded to FP8 is rarely the factor).
         */
        override fun supports(dtype: DType): Boolean =
            dtype == DType.Float32 || dtype == DType.Float64 || dtype == DType.Float16 || dtype == DType.BFloat16

        /**
         * [factor] as a scalar of [dtype] holds it (the value every backend multiplies by): rounded to
         * nearest even for Float32, Float16 and BFloat16 (through float, as PyTorch's `T(factor)`),
         * exact for Float64.
         */
        public fun factorIn(dtype: DType): Double = when (dtype) {
            DType.Float32 -> factor.toFloat().toDouble()
            DType.Float16 -> HalfPrecision.float16ToFloat(HalfPrecision.floatToFloat16(factor.toFloat())).toDouble()
            DType.BFloat16 -> HalfPrecision.bfloat16ToFloat(HalfPrecision.floatToBFloat16(factor.toFloat())).toDouble()
            else -> factor
        }

        /** Equal to another [PreMulSum] with the same [factor]. */
        override fun equals(other: Any?): Boolean = other is PreMulSum && other.factor.toBits() == factor.toBits()

        /** Hash of [factor]. */
        override fun hashCode(): Int = factor.hashCode()

        /** `PreMulSum(0.25)`. */
        override fun toString(): String = "PreMulSum($factor)"
    }

    /** The parameterless operations as static fields for Java, and their list. */
    public companion object {
        /** [ReduceOp.Sum], as a static field for Java (`ReduceOp.Sum`). */
        @JvmField public val Sum: ReduceOp = ReduceOp.Sum
        /** [ReduceOp.Product], as a static field for Java. */
        @JvmField public val Product: ReduceOp = ReduceOp.Product
        /** [ReduceOp.Min], as a static field for Java. */
        @JvmField public val Min: ReduceOp = ReduceOp.Min
        /** [ReduceOp.Max], as a static field for Java. */
        @JvmField public val Max: ReduceOp = ReduceOp.Max
        /** [ReduceOp.Avg], as a static field for Java. */
        @JvmField public val Avg: ReduceOp = ReduceOp.Avg
        /** [ReduceOp.BitwiseAnd], as a static field for Java. */
        @JvmField public val BitwiseAnd: ReduceOp = ReduceOp.BitwiseAnd
        /** [ReduceOp.BitwiseOr], as a static field for Java. */
        @JvmField public val BitwiseOr: ReduceOp = ReduceOp.BitwiseOr
        /** [ReduceOp.BitwiseXor], as a static field for Java. */
        @JvmField public val BitwiseXor: ReduceOp = ReduceOp.BitwiseXor

        /** The eight parameterless operations, in [ordinal] order ([PreMulSum] takes a factor and is not listed). */
        @JvmField
        public val entries: List<ReduceOp> = listOf(
            ReduceOp.Sum, ReduceOp.Product, ReduceOp.Min, ReduceOp.Max, ReduceOp.Avg, ReduceOp.BitwiseAnd, ReduceOp.BitwiseOr, ReduceOp.BitwiseXor,
        )

        /**
         * The parameterless operation named [name] (`"Sum"`, ...).
         *
         * @throws IllegalArgumentException for any other name (PreMulSum needs a factor: construct it).
         */
        @JvmStatic
        public fun valueOf(name: String): ReduceOp = entries.firstOrNull { it.name == name }
            ?: throw IllegalArgumentException("no ReduceOp named '$name'; pass one of ${entries.joinToString { it.name }}, or construct ReduceOp.PreMulSum(factor)")
    }
}
