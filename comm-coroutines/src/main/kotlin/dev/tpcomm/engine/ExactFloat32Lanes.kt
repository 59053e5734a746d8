package dev.tpcomm.engine

import jdk.incubator.vector.DoubleVector
import jdk.incubator.vector.FloatVector
import jdk.incubator.vector.VectorOperators
import jdk.incubator.vector.VectorShape
import jdk.incubator.vector.VectorSpecies
import java.lang.foreign.MemorySegment
import java.nio.ByteOrder

/**
 * [ExactSum]'s Float32 fast path with the Vector API, one group of [lanes] elements at a time, every
 * value of the group kept in registers: each row's floats widened to doubles (exactly) and added in
 * row order into `s`, their magnitudes into `a`; then `f`, `s` rounded to float (divided by [n], a
 * power of two, first when averaging: exact), is **certified** to be the correctly rounded sum when
 * either test holds (each side computed in double):
 *
 *     exact:  a  <=  min(2^28 m, Double.MAX_VALUE)
 *     near:   |s - f| + n 2^-51 a  <=  min((|f| - p) / 2, Double.MAX_VALUE)
 *
 * where `m` is the smallest nonzero magnitude among the values (tracked from their bits; 0 when
 * all are zero) and `p` the float below `f` in magnitude (0 for a zero `f`).
 * Exact: every value is a multiple of `q`, the ulp of `m` (`m < 2^24 q`), so every partial sum (of
 * values or of magnitudes) is a multiple of `q` at most `a` in magnitude; below `2^53 q` each is a
 * double and no addition rounded, so `s` is the exact sum and `f` its one rounding (ties to even
 * included: the sums of a few floats of one binade land on a tie about half the time). A computed
 * `a` at most `2^28 m < 2^52 q` cannot come from an exact `a` of `2^53 q` or more.
 * Near: a recursive double sum of `n` values errs by at most `g a'` from the exact sum `T`
 * (`g = (n-1)u/(1-(n-1)u)`, `u = 2^-53`, `a'` the exact sum of magnitudes, and `a >= (1-g) a'`), and
 * `n 2^-51 a = 4nu a` is more than three times that. Every value closer to `f` than half the gap
 * to `p` rounds to `f` (the gap above `f` is never smaller), so `T`, within that bound of `s`,
 * rounds to `f`. The test's own roundings (relative `u` each) are covered because the bound term is
 * at least about `4u|s|`, 2^25 times the `u (|f| - p)` they can cost. So a sum that rounded
 * (cancellation, a huge dynamic range) is still certified when it is far from a rounding boundary,
 * which is almost always.
 *
 * Zeros: all-zero values give `a = 0`, an exact `s` whose sign is IEEE's (-0 only when every value is
 * -0). A zero `f` from nonzero values is certified only by the exact test (`x + -x`), and so is an
 * infinite `f` from finite values (the exact sum beyond float's range: infinity is its rounding); the
 * caps keep both right sides finite, so NaN (the comparisons are false) and an infinity among the
 * values (`a` infinite) are never certified. A group with any element not certified is written
 * nothing and handed back to [ExactSum]'s scalar path, which decides it exactly.
 *
 * Cost per row and group: one load, two widenings, two additions and two absolute values per half,
 * three integer operations and a minimum for `m`; the tests once per group. The loads use the
 * preferred float species, the one the default reduction kernels load with. Only loaded once
 * [ExactSum] found `jdk.incubator.vector`.
 */
internal object ExactFloat32Lanes {
    private val F: VectorSpecies<Float> = FloatVector.SPECIES_PREFERRED
    private val D: VectorSpecies<Double> = DoubleVector.SPECIES_PREFERRED
    private val H: VectorSpecies<Float> = VectorSpecies.of(java.lang.Float.TYPE, VectorShape.forBitSize(F.vectorBitSize() / 2))
    private val ORDER: ByteOrder = ByteOrder.nativeOrder()

    /** Whether the platform's preferred shapes split a float vector into two double vectors. */
    val usable: Boolean get() = F.length() == 2 * D.length() && H.length() == D.length() && D.length() >= 2

    /** Elements per group: what is certified, written or handed back together. */
    val lanes: Int get() = F.length()

    /**
     * Sums (or, [average], averages; [n] a power of two) elements `[from, to)` of the [n] rows [ins]
     * (offsets in elements from [inFrom]) into the first [nOuts] of [outs] (from [outFrom]), a group
     * of [lanes] at a time, while a whole group remains. Returns where it stopped: the first element
     * of a group it could not certify (nothing of that group written; the caller decides it and goes
     * on after it) when that group ends at or before [to], else the first element left over.
     */
    fun run(
        average: Boolean, n: Int, ins: Array<MemorySegment?>, inFrom: Long, outs: Array<MemorySegment?>, nOuts: Int, outFrom: Long,
        from: Long, to: Long,
    ): Long {
        val g = F.length()
        val half = D.length() * 4L
        val bound = DoubleVector.broadcast(D, Math.scalb(if (average) 1.0 else n.toDouble(), -51))
        val scale = DoubleVector.broadcast(D, 1.0 / n)
        val cap = DoubleVector.broadcast(D, Double.MAX_VALUE)
        val halfV = DoubleVector.broadcast(D, 0.5)
        val exactSpan = DoubleVector.broadcast(D, Math.scalb(1.0, 28))
        val in0 = ins[0]!!
        var k = from
        while (k + g <= to) {
            val at = (inFrom + k) * 4
            val x = FloatVector.fromMemorySegment(F, in0, at, ORDER)
            var s0 = x.convertShape(VectorOperators.F2D, D, 0)
            var s1 = x.convertShape(VectorOperators.F2D, D, 1)
            var a0 = s0.abs()
            var a1 = s1.abs()
            var low = x.reinterpretAsInts().and(0x7FFFFFFF).sub(1).and(0x7FFFFFFF)
            for (j in 1 until n) {
                val y = FloatVector.fromMemorySegment(F, ins[j]!!, at, ORDER)
                val y0 = y.convertShape(VectorOperators.F2D, D, 0)
                val y1 = y.convertShape(VectorOperators.F2D, D, 1)
                s0 = s0.add(y0)
                s1 = s1.add(y1)
                a0 = a0.add(y0.abs())
                a1 = a1.add(y1.abs())
                low = low.min(y.reinterpretAsInts().and(0x7FFFFFFF).sub(1).and(0x7FFFFFFF))
            }
            // Exact: every value a multiple of the smallest nonzero one's ulp q, and a < 2^53 q.
            val smallest = low.add(1).reinterpretAsFloats()
            val exact0 = a0.compare(VectorOperators.LE, smallest.convertShape(VectorOperators.F2D, D, 0).mul(exactSpan).min(cap))
            val exact1 = a1.compare(VectorOperators.LE, smallest.convertShape(VectorOperators.F2D, D, 1).mul(exactSpan).min(cap))
            if (average) {
                s0 = s0.mul(scale)
                s1 = s1.mul(scale)
            }
            val f0 = s0.convertShape(VectorOperators.D2F, H, 0)
            val f1 = s1.convertShape(VectorOperators.D2F, H, 0)
            val b0 = f0.convertShape(VectorOperators.F2D, D, 0)
            val b1 = f1.convertShape(VectorOperators.F2D, D, 0)
            // Half the gap between |f| and the float below it (0 below a zero f).
            val p0 = f0.reinterpretAsInts().and(0x7FFFFFFF).sub(1).max(0).reinterpretAsFloats().convertShape(VectorOperators.F2D, D, 0)
            val p1 = f1.reinterpretAsInts().and(0x7FFFFFFF).sub(1).max(0).reinterpretAsFloats().convertShape(VectorOperators.F2D, D, 0)
            val ok0 = s0.sub(b0).abs().add(a0.mul(bound)).compare(VectorOperators.LE, b0.abs().sub(p0).mul(halfV).min(cap)).or(exact0)
            val ok1 = s1.sub(b1).abs().add(a1.mul(bound)).compare(VectorOperators.LE, b1.abs().sub(p1).mul(halfV).min(cap)).or(exact1)
            if (!ok0.and(ok1).allTrue()) return k
            val out = (outFrom + k) * 4
            for (o in 0 until nOuts) {
                val seg = outs[o]!!
                f0.intoMemorySegment(seg, out, ORDER)
                f1.intoMemorySegment(seg, out + half, ORDER)
            }
            k += g
        }
        return k
    }
}
