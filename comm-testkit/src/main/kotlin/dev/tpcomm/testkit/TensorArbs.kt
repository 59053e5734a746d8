package dev.tpcomm.testkit

import dev.tpcomm.DType
import dev.tpcomm.Tensor
import io.kotest.property.Arb
import io.kotest.property.arbitrary.arbitrary
import io.kotest.property.arbitrary.element
import io.kotest.property.arbitrary.int
import io.kotest.property.arbitrary.list
import kotlin.random.Random

/**
 * Kotest generators of [DType]s: uniformly one of [dtypes] (all of them by default). Shrinks toward
 * the first of [dtypes].
 */
public fun Arb.Companion.dtype(dtypes: Collection<DType> = DType.entries): Arb<DType> {
    require(dtypes.isNotEmpty()) { "Arb.dtype: pass at least one DType" }
    return Arb.element(dtypes.toList())
}

/**
 * Kotest generators of tensor shapes: [ndim] dimensions (default 1 to 3), each of a size in [dim]
 * (default 1 to 8). Shrinks toward fewer and smaller dimensions. A size of 0 is allowed if [dim]
 * includes it (an empty tensor).
 */
public fun Arb.Companion.shape(ndim: IntRange = 1..3, dim: IntRange = 1..8): Arb<List<Int>> {
    require(!ndim.isEmpty() && ndim.first >= 0) { "Arb.shape: ndim must be a non-empty range of counts >= 0, got $ndim" }
    require(!dim.isEmpty() && dim.first >= 0) { "Arb.shape: dim must be a non-empty range of sizes >= 0, got $dim" }
    return Arb.list(Arb.int(dim), ndim)
}

/**
 * Kotest generators of host tensors (in host memory, no device needed) of a dtype from [dtype]
 * and a shape from [shape], every element drawn independently:
 * - floating-point dtypes: uniform in [floats] (default `-2.0..2.0`), rounded to the dtype (so a
 *   `Float16` or `BFloat16` element holds exactly the value read back);
 * - integer dtypes: uniform in [ints] intersected with the dtype's range; null (the default) means
 *   the dtype's whole range, so sums and products wrap around as on the backends.
 *
 * Each sample is a new tensor the property owns (it may write into it). Deterministic for a given
 * Kotest seed. Values do not shrink; the dtype and shape shrink as their generators do.
 */
public fun Arb.Companion.tensor(
    dtype: Arb<DType> = Arb.dtype(),
    shape: Arb<List<Int>> = Arb.shape(),
    floats: ClosedFloatingPointRange<Double> = -2.0..2.0,
    ints: LongRange? = null,
): Arb<Tensor> {
    require(floats.start.isFinite() && floats.endInclusive.isFinite() && floats.start <= floats.endInclusive) {
        "Arb.tensor: floats must be a finite, non-empty range, got $floats"
    }
    require(ints == null || !ints.isEmpty()) { "Arb.tensor: ints must be a non-empty range or null, got $ints" }
    return arbitrary { rs ->
        val d = dtype.bind()
        val s = shape.bind()
        TensorFill.random(d, s, rs.random, floats, ints)
    }
}

/** [Arb.Companion.tensor] with a fixed [dtype] and [shape]: the inputs of a layer of known size. */
public fun Arb.Companion.tensor(
    dtype: DType,
    shape: List<Int>,
    floats: ClosedFloatingPointRange<Double> = -2.0..2.0,
    ints: LongRange? = null,
): Arb<Tensor> {
    require(shape.all { it >= 0 }) { "Arb.tensor: shape $shape has a negative size" }
    return tensor(Arb.element(listOf(dtype)), Arb.element(listOf(shape)), floats, ints)
}

/** Fills tensors with random values for [Arb.Companion.tensor]. */
internal object TensorFill {
    fun range(dtype: DType): LongRange = when (dtype) {
        DType.Int8 -> Byte.MIN_VALUE.toLong()..Byte.MAX_VALUE.toLong()
        DType.UInt8 -> 0L..255L
        DType.Int16 -> Short.MIN_VALUE.toLong()..Short.MAX_VALUE.toLong()
        DType.Int32 -> Int.MIN_VALUE.toLong()..Int.MAX_VALUE.toLong()
        DType.UInt32 -> 0L..0xFFFF_FFFFL
        DType.Bool -> 0L..1L
        else -> Long.MIN_VALUE..Long.MAX_VALUE // Int64, and UInt64 as its bits
    }

    fun random(dtype: DType, shape: List<Int>, random: Random, floats: ClosedFloatingPointRange<Double>, ints: LongRange?): Tensor {
        val t = Tensor.zeros(dtype, shape)
        if (dtype.isFloatingPoint) {
            val lo = floats.start
            val hi = floats.endInclusive
            for (i in 0 until t.numel) t.setDouble(i, if (lo == hi) lo else lo + (hi - lo) * random.nextDouble())
        } else {
            val full = range(dtype)
            val lo = maxOf(full.first, ints?.first ?: full.first)
            val hi = minOf(full.last, ints?.last ?: full.last)
            require(lo <= hi) { "Arb.tensor: ints $ints holds no value of $dtype (whose range is $full)" }
            for (i in 0 until t.numel) {
                val v = when {
                    lo == Long.MIN_VALUE && hi == Long.MAX_VALUE -> random.nextLong()
                    hi == Long.MAX_VALUE -> random.nextLong(lo - 1, hi) + 1
                    else -> random.nextLong(lo, hi + 1)
                }
                t.setLong(i, v)
            }
        }
        return t
    }
}
