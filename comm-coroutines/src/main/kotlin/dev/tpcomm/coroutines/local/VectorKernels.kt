package dev.tpcomm.coroutines.local

import dev.tpcomm.ReduceOp
import jdk.incubator.vector.FloatVector
import jdk.incubator.vector.VectorSpecies
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.nio.ByteOrder

/**
 * Float32 reductions with the Vector API (`jdk.incubator.vector`), reading the ranks' segments
 * directly: one vector load per rank and one store per output for each group of lanes. Only
 * touched when [ReduceKernels.vectorAvailable] found the module, so the class never loads without it.
 */
internal object VectorKernels {
    private val SPECIES: VectorSpecies<Float> = FloatVector.SPECIES_PREFERRED
    private val ORDER: ByteOrder = ByteOrder.nativeOrder()
    private val F32 = ValueLayout.JAVA_FLOAT_UNALIGNED

    /** Touches the API once so a broken module shows up as "not available" rather than at the first collective. */
    fun probe(): Boolean = SPECIES.length() > 0

    fun float32(
        op: ReduceOp, w: Int,
        ins: Array<MemorySegment?>, inOff: Long,
        outs: Array<MemorySegment?>, nOuts: Int, outOff: Long,
        count: Long,
    ) {
        when (op) {
            ReduceOp.Sum -> loop(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.add(b) }, { x, y -> x + y })
            ReduceOp.Avg -> loop(w, ins, inOff, outs, nOuts, outOff, count, true, { a, b -> a.add(b) }, { x, y -> x + y })
            ReduceOp.Product -> loop(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.mul(b) }, { x, y -> x * y })
            ReduceOp.Min -> loop(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.min(b) }, { x, y -> Math.min(x, y) })
            ReduceOp.Max -> loop(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.max(b) }, { x, y -> Math.max(x, y) })
            else -> throw IllegalArgumentException("$op is not defined on Float32")
        }
    }

    private inline fun loop(
        w: Int,
        ins: Array<MemorySegment?>, inOff: Long,
        outs: Array<MemorySegment?>, nOuts: Int, outOff: Long,
        count: Long, avg: Boolean,
        vcombine: (FloatVector, FloatVector) -> FloatVector,
        combine: (Float, Float) -> Float,
    ) {
        val lanes = SPECIES.length()
        val div = w.toFloat()
        val in0 = ins[0]!!
        val vectorEnd = count - count % lanes
        var i = 0L
        if (w == 4 && nOuts == 4 && !avg) {
            // The common tensor-parallel case, unrolled: all-reduce over four ranks.
            val in1 = ins[1]!!; val in2 = ins[2]!!; val in3 = ins[3]!!
            val o0 = outs[0]!!; val o1 = outs[1]!!; val o2 = outs[2]!!; val o3 = outs[3]!!
            while (i < vectorEnd) {
                val ib = (inOff + i) * 4
                val ob = (outOff + i) * 4
                val v = vcombine(
                    vcombine(FloatVector.fromMemorySegment(SPECIES, in0, ib, ORDER), FloatVector.fromMemorySegment(SPECIES, in1, ib, ORDER)),
                    FloatVector.fromMemorySegment(SPECIES, in2, ib, ORDER),
                ).let { vcombine(it, FloatVector.fromMemorySegment(SPECIES, in3, ib, ORDER)) }
                v.intoMemorySegment(o0, ob, ORDER)
                v.intoMemorySegment(o1, ob, ORDER)
                v.intoMemorySegment(o2, ob, ORDER)
                v.intoMemorySegment(o3, ob, ORDER)
                i += lanes
            }
        } else {
            while (i < vectorEnd) {
                val ib = (inOff + i) * 4
                var v = FloatVector.fromMemorySegment(SPECIES, in0, ib, ORDER)
                for (r in 1 until w) v = vcombine(v, FloatVector.fromMemorySegment(SPECIES, ins[r]!!, ib, ORDER))
                if (avg) v = v.div(div)
                val ob = (outOff + i) * 4
                for (o in 0 until nOuts) v.intoMemorySegment(outs[o]!!, ob, ORDER)
                i += lanes
            }
        }
        while (i < count) {
            val ib = (inOff + i) * 4
            var x = in0.get(F32, ib)
            for (r in 1 until w) x = combine(x, ins[r]!!.get(F32, ib))
            if (avg) x /= div
            val ob = (outOff + i) * 4
            for (o in 0 until nOuts) outs[o]!!.set(F32, ob, x)
            i++
        }
    }
}
