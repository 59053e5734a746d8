package dev.tpcomm.engine

import jdk.incubator.vector.DoubleVector
import jdk.incubator.vector.FloatVector
import jdk.incubator.vector.IntVector
import jdk.incubator.vector.VectorOperators
import jdk.incubator.vector.VectorShape
import jdk.incubator.vector.VectorSpecies
import java.lang.foreign.MemorySegment
import java.nio.ByteOrder

/**
 * [ExactSum]'s Float32 fast path with the Vector API: for a block of elements, every row's floats
 * widened to doubles and summed in row order, and beside it, from the floats' bits, each element's
 * largest exponent field `E` and smallest `e` among its nonzero values (a subnormal counts as 1).
 * The double sum is then **certified exact** when `E < 255` (no NaN, no infinity) and
 * `E - e <= 29 - ceil(log2 n)`: every value is a multiple of `2^(e-150)` and below `2^(E-126)` in
 * magnitude, so every partial sum is a multiple of `2^(e-150)` below `2^(E-126+ceil(log2 n))`,
 * at most 53 significant bits, exact in a double. The exact double's conversion to float (IEEE
 * rounding, subnormals and overflow included) is the correctly rounded result, the bits of the
 * scalar path; a group of lanes with any element not certified (a wide range, NaN, infinity) is
 * handed back for the scalar path, which decides with TwoSum and, when needed, the expansion. Only
 * loaded once [ExactSum] found `jdk.incubator.vector`.
 */
internal object ExactFloat32Lanes {
    private val D: VectorSpecies<Double> = DoubleVector.SPECIES_PREFERRED
    private val F: VectorSpecies<Float> = VectorSpecies.of(java.lang.Float.TYPE, VectorShape.forBitSize(D.vectorBitSize() / 2))
    private val I: VectorSpecies<Int> = IntVector.SPECIES_PREFERRED
    private val ORDER: ByteOrder = ByteOrder.nativeOrder()

    /** Whether the platform's preferred shapes give whole groups (a double and a float species of the same lane count, both dividing [lanes]). */
    val usable: Boolean get() = D.length() == F.length() && D.length() >= 2 && lanes % D.length() == 0 && lanes % I.length() == 0 && BLOCK % lanes == 0

    /** Elements per group: what is certified, written or handed back together. */
    val lanes: Int get() = maxOf(D.length(), I.length())

    /** Elements per block: the running sums and exponent bounds stay in L1 ([BLOCK] of each). */
    const val BLOCK: Int = 512

    private const val EXPONENT = 0x7F800000
    private const val MAGNITUDE = 0x7FFFFFFF
    private const val MIN_NORMAL_EXPONENT = 0x00800000

    /**
     * Sums elements `[k, k + len)` (offsets in elements from [inFrom] / [outFrom]; [len] a multiple of
     * [lanes], at most [BLOCK]) of the [n] rows [ins] into the first [nOuts] of [outs] (divided by
     * [n], a power of two, when [average]), row by row through [acc], [hi] and [lo] (each at least
     * [len]), so no vector lives across a loop. Every group of [lanes] whose sums are certified exact
     * is written; the first element of each other group is stored in [failed], written nothing, for
     * the scalar path. Returns how many groups failed.
     */
    fun block(
        average: Boolean, n: Int, ins: Array<MemorySegment?>, inFrom: Long, outs: Array<MemorySegment?>, nOuts: Int, outFrom: Long,
        k: Long, len: Int, acc: DoubleArray, hi: IntArray, lo: IntArray, failed: LongArray,
    ): Int {
        val dl = D.length()
        val il = I.length()
        val base = (inFrom + k) * 4
        for (j in 0 until n) {
            val row = ins[j]!!
            var i = 0
            while (i < len) {
                val bits = IntVector.fromMemorySegment(I, row, base + i * 4L, ORDER)
                val e = bits.and(EXPONENT)
                // Zeros are neutral for the smallest exponent; subnormals count as the smallest normal's.
                val eLow = e.max(MIN_NORMAL_EXPONENT).blend(EXPONENT, bits.and(MAGNITUDE).compare(VectorOperators.EQ, 0))
                if (j == 0) {
                    e.intoArray(hi, i)
                    eLow.intoArray(lo, i)
                } else {
                    IntVector.fromArray(I, hi, i).max(e).intoArray(hi, i)
                    IntVector.fromArray(I, lo, i).min(eLow).intoArray(lo, i)
                }
                i += il
            }
            i = 0
            while (i < len) {
                val x = FloatVector.fromMemorySegment(F, row, base + i * 4L, ORDER).convertShape(VectorOperators.F2D, D, 0) as DoubleVector
                (if (j == 0) x else DoubleVector.fromArray(D, acc, i).add(x)).intoArray(acc, i)
                i += dl
            }
        }
        val window = (29 - (32 - Integer.numberOfLeadingZeros(n - 1))) shl 23
        val scale = 1.0 / n
        val out = (outFrom + k) * 4
        var fails = 0
        var g = 0
        while (g < len) {
            var certified = true
            var i = g
            while (i < g + lanes) {
                val top = IntVector.fromArray(I, hi, i)
                if (top.compare(VectorOperators.EQ, EXPONENT).or(top.sub(IntVector.fromArray(I, lo, i)).compare(VectorOperators.GT, window)).anyTrue()) certified = false
                i += il
            }
            if (!certified) {
                failed[fails++] = k + g
            } else {
                i = g
                while (i < g + lanes) {
                    var sum = DoubleVector.fromArray(D, acc, i)
                    if (average) sum = sum.mul(scale)
                    val r = sum.convertShape(VectorOperators.D2F, F, 0) as FloatVector
                    for (o in 0 until nOuts) r.intoMemorySegment(outs[o]!!, out + i * 4L, ORDER)
                    i += dl
                }
            }
            g += lanes
        }
        return fails
    }
}
