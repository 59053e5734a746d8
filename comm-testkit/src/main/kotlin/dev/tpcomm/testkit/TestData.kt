package dev.tpcomm.testkit

import dev.tpcomm.DType
import dev.tpcomm.Tensor
import kotlin.random.Random

/**
 * Deterministic test inputs: the same (seed, salt, rank, dtype, shape) gives the same bits in
 * every process, so every rank can rebuild every other rank's input.
 */
internal object TestData {
    fun mix(seed: Long, salt: Long, rank: Int): Long {
        var h = seed * -0x61c8864680b583ebL + salt
        h = (h xor (h ushr 31)) * -0x4b47d5b1a5b51e5bL + rank
        h = (h xor (h ushr 29)) * -0x3c6ef372fe94f82bL
        return h xor (h ushr 32)
    }

    /**
     * A host tensor of [dtype] and [shape]: integers uniform over the dtype's whole range (so sums
     * and products wrap, and unsigned values above the signed range are common), Bool true or false,
     * floats uniform in [-2, 2) rounded to the dtype (products of eight stay far from Float16's
     * overflow, and sums and products of eight within FP8's finite range).
     */
    fun input(seed: Long, salt: Long, rank: Int, dtype: DType, shape: List<Int>): Tensor {
        val random = Random(mix(seed, salt, rank))
        val t = Tensor.zeros(dtype, shape)
        for (i in 0 until t.numel) {
            when (dtype) {
                DType.Int8, DType.UInt8 -> t.setLong(i, random.nextInt(256).toLong())
                DType.Int16 -> t.setLong(i, random.nextInt(65536).toLong())
                DType.Int32, DType.UInt32 -> t.setLong(i, random.nextInt().toLong())
                DType.Int64, DType.UInt64 -> t.setLong(i, random.nextLong())
                DType.Bool -> t.setLong(i, random.nextInt(2).toLong())
                else -> t.setDouble(i, random.nextDouble(-2.0, 2.0))
            }
        }
        return t
    }

    /** A host copy of [t] (for "unchanged" checks). */
    fun snapshot(placement: TensorPlacement, t: Tensor): Tensor = placement.toHost(t).copy()

    /** Null when [actual] has [expected]'s dtype, shape and bits; else what differs. */
    fun exactMismatch(expected: Tensor, actual: Tensor): String? {
        if (expected.dtype != actual.dtype || expected.shape != actual.shape) {
            return "got ${actual.dtype}${actual.shape}, expected ${expected.dtype}${expected.shape}"
        }
        if (expected.contentEquals(actual)) return null
        var wrong = 0L
        var first = -1L
        for (i in 0 until expected.numel) {
            val differs = if (!expected.dtype.isFloatingPoint) expected.getLong(i) != actual.getLong(i)
            else expected.getDouble(i).toRawBits() != actual.getDouble(i).toRawBits()
            if (differs) { wrong++; if (first < 0) first = i }
        }
        if (wrong == 0L) return "element bits differ although every value reads back equal (NaN payload or padding)"
        val show = { t: Tensor -> if (!t.dtype.isFloatingPoint) t.getLong(first).toString() else t.getDouble(first).toString() }
        return "$wrong of ${expected.numel} elements differ; first at $first: got ${show(actual)}, expected ${show(expected)}"
    }
}
