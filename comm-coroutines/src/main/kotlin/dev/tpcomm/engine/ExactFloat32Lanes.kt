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

    /** Elements per block: the running sums and their checks stay in L1 ([BLOCK] doubles each). */
    const val BLOCK: Int = 512

    /**
     * Sums elements `[k, k + len)` (offsets in elements from [inFrom] / [outFrom]; [len] a multiple of
     * [lanes], at most [BLOCK]) of the [n] rows [ins] into the first [nOuts] of [outs] (divided by
     * [n], a power of two, when [average]), row by row through [acc] and [err] (each at least [len]),
     * so no vector lives across a loop. Every group of lanes whose sums were exact and finite is
     * written; the first element of each other group is stored in [failed], written nothing, for the
     * scalar path. Returns how many groups failed.
     */
    fun block(
        average: Boolean, n: Int, ins: Array<MemorySegment?>, inFrom: Long, outs: Array<MemorySegment?>, nOuts: Int, outFrom: Long,
        k: Long, len: Int, acc: DoubleArray, err: DoubleArray, failed: LongArray,
    ): Int {
        val l = D.length()
        val base = (inFrom + k) * 4
        val first = ins[0]!!
        var i = 0
        while (i < len) {
            (FloatVector.fromMemorySegment(F, first, base + i * 4L, ORDER).convertShape(VectorOperators.F2D, D, 0) as DoubleVector).intoArray(acc, i)
            DoubleVector.zero(D).intoArray(err, i)
            i += l
        }
        for (j in 1 until n) {
            val row = ins[j]!!
            i = 0
            while (i < len) {
                val a = DoubleVector.fromArray(D, acc, i)
                val x = FloatVector.fromMemorySegment(F, row, base + i * 4L, ORDER).convertShape(VectorOperators.F2D, D, 0) as DoubleVector
                val t = a.add(x)
                val bp = t.sub(a)
                // TwoSum's error of this step; a NaN or an infinity makes it NaN.
                DoubleVector.fromArray(D, err, i).add(a.sub(t.sub(bp)).add(x.sub(bp)).abs()).intoArray(err, i)
                t.intoArray(acc, i)
                i += l
            }
        }
        val scale = 1.0 / n
        val out = (outFrom + k) * 4
        var fails = 0
        i = 0
        while (i < len) {
            if (DoubleVector.fromArray(D, err, i).compare(VectorOperators.NE, 0.0).anyTrue()) {
                failed[fails++] = k + i
            } else {
                var sum = DoubleVector.fromArray(D, acc, i)
                if (average) sum = sum.mul(scale)
                val r = sum.convertShape(VectorOperators.D2F, F, 0) as FloatVector
                for (o in 0 until nOuts) r.intoMemorySegment(outs[o]!!, out + i * 4L, ORDER)
            }
            i += l
        }
        return fails
    }
}
