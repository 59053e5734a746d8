package dev.tpcomm.engine

import jdk.incubator.vector.DoubleVector
import jdk.incubator.vector.IntVector
import jdk.incubator.vector.VectorOperators
import jdk.incubator.vector.VectorShape
import jdk.incubator.vector.VectorSpecies
import java.lang.foreign.MemorySegment
import java.nio.ByteOrder

/**
 * [ExactSum]'s Float32 fast path with the Vector API. For a group of [lanes] elements, one load per
 * row gives both the floats (widened to doubles, two halves, summed in row order) and their bits,
 * from which the group keeps each element's largest magnitude and smallest nonzero magnitude in
 * registers. The element's largest exponent field `E` and a lower bound `e` on its smallest nonzero
 * one (a subnormal counts as 1; a power of two may count one below its own, which only makes the
 * test stricter) follow after the last row. The double sum is **certified exact** when `E < 255`
 * (no NaN, no infinity) and `E - e <= 29 - ceil(log2 n)`: every value is a multiple of `2^(e-150)`
 * and below `2^(E-126)` in magnitude, so every partial sum is a multiple of `2^(e-150)` below
 * `2^(E-126+ceil(log2 n))`, at most 53 significant bits, exact in a double. The exact double's
 * conversion to float (IEEE rounding, subnormals and overflow included) is the correctly rounded
 * result, the bits of the scalar path; a group with any element not certified (a wide range, NaN,
 * infinity) is handed back for the scalar path, which decides with TwoSum and, when needed, the
 * expansion. Only loaded once [ExactSum] found `jdk.incubator.vector`.
 */
internal object ExactFloat32Lanes {
    private val D: VectorSpecies<Double> = DoubleVector.SPECIES_PREFERRED
    /** Ints of the doubles' shape: one load is two halves of [D.length] floats each. */
    private val I: VectorSpecies<Int> = VectorSpecies.of(Integer.TYPE, VectorShape.forBitSize(D.vectorBitSize()))
    /** Floats of the doubles' shape: each half of a group rounds back into its own half of one vector (contraction parts 0 and -1). */
    private val F: VectorSpecies<Float> = VectorSpecies.of(java.lang.Float.TYPE, VectorShape.forBitSize(D.vectorBitSize()))
    private val ORDER: ByteOrder = ByteOrder.nativeOrder()

    /** Whether the platform's preferred shapes give whole groups (at least two doubles; as many ints and floats as twice the doubles). */
    val usable: Boolean get() = D.length() >= 2 && F.length() == I.length() && I.length() == 2 * D.length() && BLOCK % lanes == 0

    /** Elements per group: what is certified, written or handed back together (one int vector). */
    val lanes: Int get() = I.length()

    /** Elements per call at most: bounds the groups one call hands back. */
    const val BLOCK: Int = 512

    private const val EXPONENT = 0x7F800000
    private const val MAGNITUDE = 0x7FFFFFFF
    private const val MIN_NORMAL_EXPONENT = 0x00800000

    /**
     * Maps a magnitude `m` to `m - 1` in an order where 0 comes last: `m + 0x7FFFFFFF` (mod 2^32)
     * is `(m - 1)` with its top bit flipped, so a signed minimum over it is the unsigned minimum of
     * `m - 1`, which skips zeros (their `m - 1` is the largest unsigned value).
     */
    private const val SKIP_ZERO = 0x7FFFFFFF

    /**
     * Sums elements `[k, k + len)` (offsets in elements from [inFrom] / [outFrom]; [len] a multiple of
     * [lanes], at most [BLOCK]) of the [n] rows [ins] into the first [nOuts] of [outs] (divided by
     * [n], a power of two, when [average]). Every input of a group is read before the group is
     * written, so an output may be an input. Every group whose sums are certified exact is written;
     * the first element of each other group is stored in [failed], written nothing, for the scalar
     * path. Returns how many groups failed.
     */
    fun block(
        average: Boolean, n: Int, ins: Array<MemorySegment?>, inFrom: Long, outs: Array<MemorySegment?>, nOuts: Int, outFrom: Long,
        k: Long, len: Int, failed: LongArray,
    ): Int {
        val window = (29 - (32 - Integer.numberOfLeadingZeros(n - 1))) shl 23
        val scale = 1.0 / n
        val base = (inFrom + k) * 4
        val out = (outFrom + k) * 4
        // The rows are never null here; one unchecked view spares a null check per load.
        @Suppress("UNCHECKED_CAST") val rows = ins as Array<MemorySegment>
        @Suppress("UNCHECKED_CAST") val targets = outs as Array<MemorySegment>
        // No vector below meets a Kotlin null check (a cast of a platform type, or a platform value
        // stored in a non-null variable): the check is a call taking the vector, and C2 boxes the
        // vector for it once the kernel's node budget stops inlining such calls (2-4x slower).
        var fails = 0
        var g = 0
        while (g < len) {
            val at = base + g * 4L
            var bits = IntVector.fromMemorySegment(I, rows[0], at, ORDER)
            var hi = bits.and(MAGNITUDE)
            var lo = hi.add(SKIP_ZERO)
            var f = bits.reinterpretAsFloats()
            var a0 = f.convertShape(VectorOperators.F2D, D, 0).reinterpretAsDoubles()
            var a1 = f.convertShape(VectorOperators.F2D, D, 1).reinterpretAsDoubles()
            for (j in 1 until n) {
                bits = IntVector.fromMemorySegment(I, rows[j], at, ORDER)
                val m = bits.and(MAGNITUDE)
                hi = hi.max(m)
                lo = lo.min(m.add(SKIP_ZERO))
                f = bits.reinterpretAsFloats()
                a0 = a0.add(f.convertShape(VectorOperators.F2D, D, 0))
                a1 = a1.add(f.convertShape(VectorOperators.F2D, D, 1))
            }
            val top = hi.and(EXPONENT)
            val bottom = lo.sub(SKIP_ZERO).and(EXPONENT).max(MIN_NORMAL_EXPONENT)
            if (top.compare(VectorOperators.EQ, EXPONENT).or(top.sub(bottom).compare(VectorOperators.GT, window)).anyTrue()) {
                failed[fails++] = k + g
            } else {
                if (average) {
                    a0 = a0.mul(scale)
                    a1 = a1.mul(scale)
                }
                // Each half rounded once into its half of the group (the other half zeros): or-ing the bits joins them.
                val r = a0.convertShape(VectorOperators.D2F, F, 0).reinterpretAsInts().or(a1.convertShape(VectorOperators.D2F, F, -1).reinterpretAsInts())
                val o = out + g * 4L
                for (i in 0 until nOuts) {
                    r.intoMemorySegment(targets[i], o, ORDER)
                }
            }
            g += lanes
        }
        return fails
    }

}
