package dev.tpcomm.engine

import jdk.incubator.vector.DoubleVector
import jdk.incubator.vector.FloatVector
import jdk.incubator.vector.VectorOperators
import jdk.incubator.vector.VectorShape
import jdk.incubator.vector.VectorSpecies
import java.lang.foreign.MemorySegment
import java.nio.ByteOrder

/**
 * [ExactSum]'s Float32 fast path with the Vector API: for a group of lanes, every row's floats
 * widened to doubles and summed in row order, each addition checked with TwoSum (Knuth) lane by
 * lane. When no addition in the group rounded and the sums are finite, each double is the exact
 * sum, and its conversion to float (IEEE rounding, subnormals and overflow included) is the
 * correctly rounded result, the bits the scalar path gives; a group with any inexact or special lane
 * is handed back for the scalar path. Only loaded once [ExactSum] found `jdk.incubator.vector`.
 */
internal object ExactFloat32Lanes {
    private val D: VectorSpecies<Double> = DoubleVector.SPECIES_PREFERRED
    private val F: VectorSpecies<Float> = VectorSpecies.of(java.lang.Float.TYPE, VectorShape.forBitSize(D.vectorBitSize() / 2))
    private val ORDER: ByteOrder = ByteOrder.nativeOrder()

    /** Whether the platform's preferred shapes give whole groups (a double and a float species of the same lane count). */
    val usable: Boolean get() = D.length() == F.length() && D.length() >= 2

    /** Lanes per group. */
    val lanes: Int get() = D.length()

    /**
     * Sums elements `[k, k + lanes)` (offsets in elements from [inFrom] / [outFrom]) of the [n] rows
     * [ins] into the first [nOuts] of [outs] (divided by [n], a power of two, when [average]). Returns
     * false, writing nothing, when a lane's sum was not exact or not finite.
     */
    fun group(average: Boolean, n: Int, ins: Array<MemorySegment?>, inFrom: Long, outs: Array<MemorySegment?>, nOuts: Int, outFrom: Long, k: Long): Boolean {
        val at = (inFrom + k) * 4
        var acc = (FloatVector.fromMemorySegment(F, ins[0]!!, at, ORDER).convertShape(VectorOperators.F2D, D, 0) as DoubleVector)
        var err = DoubleVector.zero(D)
        for (j in 1 until n) {
            val x = FloatVector.fromMemorySegment(F, ins[j]!!, at, ORDER).convertShape(VectorOperators.F2D, D, 0) as DoubleVector
            val t = acc.add(x)
            val bp = t.sub(acc)
            err = err.add(acc.sub(t.sub(bp)).add(x.sub(bp)).abs())
            acc = t
        }
        // A NaN or an infinity anywhere makes err NaN; any rounded step makes it nonzero.
        if (err.compare(VectorOperators.NE, 0.0).anyTrue()) return false
        if (average) acc = acc.mul(1.0 / n)
        val r = acc.convertShape(VectorOperators.D2F, F, 0) as FloatVector
        val o = (outFrom + k) * 4
        for (i in 0 until nOuts) r.intoMemorySegment(outs[i]!!, o, ORDER)
        return true
    }
}
