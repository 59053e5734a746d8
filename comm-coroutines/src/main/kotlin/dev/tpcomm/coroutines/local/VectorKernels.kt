package dev.tpcomm.coroutines.local

import dev.tpcomm.ReduceOp
import dev.tpcomm.DType
import jdk.incubator.vector.DoubleVector
import jdk.incubator.vector.FloatVector
import jdk.incubator.vector.IntVector
import jdk.incubator.vector.LongVector
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
    private val F64 = ValueLayout.JAVA_DOUBLE_UNALIGNED
    private val I32 = ValueLayout.JAVA_INT_UNALIGNED
    private val I64 = ValueLayout.JAVA_LONG_UNALIGNED
    private val D: VectorSpecies<Double> = DoubleVector.SPECIES_PREFERRED
    private val I: VectorSpecies<Int> = IntVector.SPECIES_PREFERRED
    private val L: VectorSpecies<Long> = LongVector.SPECIES_PREFERRED

    /**
     * Whether [other] has a vector kernel for [op] on [dtype]: Float64 for every op; Int32 and
     * Int64 for all but Avg (and, on Int64, Product), whose lane-wise division or multiplication
     * x86 lacks. The rest takes the scalar block path.
     */
    fun supports(dtype: DType, op: ReduceOp): Boolean = when (dtype) {
        DType.Float64 -> true
        DType.Int32 -> op != ReduceOp.Avg
        DType.Int64 -> op != ReduceOp.Avg && op != ReduceOp.Product
        else -> false
    }

    /** Vector reductions of Float64, Int32 and Int64 (see [supports]). */
    fun other(
        dtype: DType, op: ReduceOp, w: Int,
        ins: Array<MemorySegment?>, inOff: Long,
        outs: Array<MemorySegment?>, nOuts: Int, outOff: Long,
        count: Long,
    ) {
        when (dtype) {
            DType.Float64 -> when (op) {
                ReduceOp.Sum -> f64Sum(w, ins, inOff, outs, nOuts, outOff, count)
                ReduceOp.Avg -> f64Avg(w, ins, inOff, outs, nOuts, outOff, count)
                ReduceOp.Product -> f64Product(w, ins, inOff, outs, nOuts, outOff, count)
                ReduceOp.Min -> f64Min(w, ins, inOff, outs, nOuts, outOff, count)
                ReduceOp.Max -> f64Max(w, ins, inOff, outs, nOuts, outOff, count)
                else -> throw IllegalArgumentException("$op is not defined on Float64")
            }
            DType.Int32 -> when (op) {
                ReduceOp.Sum -> i32Sum(w, ins, inOff, outs, nOuts, outOff, count)
                ReduceOp.Product -> i32Product(w, ins, inOff, outs, nOuts, outOff, count)
                ReduceOp.Min -> i32Min(w, ins, inOff, outs, nOuts, outOff, count)
                ReduceOp.Max -> i32Max(w, ins, inOff, outs, nOuts, outOff, count)
                ReduceOp.BitwiseAnd -> i32BitwiseAnd(w, ins, inOff, outs, nOuts, outOff, count)
                ReduceOp.BitwiseOr -> i32BitwiseOr(w, ins, inOff, outs, nOuts, outOff, count)
                ReduceOp.BitwiseXor -> i32BitwiseXor(w, ins, inOff, outs, nOuts, outOff, count)
                else -> throw IllegalArgumentException("no vector kernel for $op on Int32")
            }
            DType.Int64 -> when (op) {
                ReduceOp.Sum -> i64Sum(w, ins, inOff, outs, nOuts, outOff, count)
                ReduceOp.Min -> i64Min(w, ins, inOff, outs, nOuts, outOff, count)
                ReduceOp.Max -> i64Max(w, ins, inOff, outs, nOuts, outOff, count)
                ReduceOp.BitwiseAnd -> i64BitwiseAnd(w, ins, inOff, outs, nOuts, outOff, count)
                ReduceOp.BitwiseOr -> i64BitwiseOr(w, ins, inOff, outs, nOuts, outOff, count)
                ReduceOp.BitwiseXor -> i64BitwiseXor(w, ins, inOff, outs, nOuts, outOff, count)
                else -> throw IllegalArgumentException("no vector kernel for $op on Int64")
            }
            else -> throw IllegalArgumentException("no vector kernel for $dtype")
        }
    }

    private fun f64Sum(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        f64(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.add(b) }, { x, y -> x + y })

    private fun f64Avg(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        f64(w, ins, inOff, outs, nOuts, outOff, count, true, { a, b -> a.add(b) }, { x, y -> x + y })

    private fun f64Product(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        f64(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.mul(b) }, { x, y -> x * y })

    private fun f64Min(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        f64(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.min(b) }, { x, y -> Math.min(x, y) })

    private fun f64Max(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        f64(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.max(b) }, { x, y -> Math.max(x, y) })

    private fun i32Sum(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        i32(w, ins, inOff, outs, nOuts, outOff, count, { a, b -> a.add(b) }, { x, y -> x + y })

    private fun i32Product(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        i32(w, ins, inOff, outs, nOuts, outOff, count, { a, b -> a.mul(b) }, { x, y -> x * y })

    private fun i32Min(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        i32(w, ins, inOff, outs, nOuts, outOff, count, { a, b -> a.min(b) }, { x, y -> Math.min(x, y) })

    private fun i32Max(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        i32(w, ins, inOff, outs, nOuts, outOff, count, { a, b -> a.max(b) }, { x, y -> Math.max(x, y) })

    private fun i32BitwiseAnd(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        i32(w, ins, inOff, outs, nOuts, outOff, count, { a, b -> a.and(b) }, { x, y -> x and y })

    private fun i32BitwiseOr(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        i32(w, ins, inOff, outs, nOuts, outOff, count, { a, b -> a.or(b) }, { x, y -> x or y })

    private fun i32BitwiseXor(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        i32(w, ins, inOff, outs, nOuts, outOff, count, { a, b -> a.lanewise(jdk.incubator.vector.VectorOperators.XOR, b) }, { x, y -> x xor y })

    private fun i64Sum(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        i64(w, ins, inOff, outs, nOuts, outOff, count, { a, b -> a.add(b) }, { x, y -> x + y })

    private fun i64Min(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        i64(w, ins, inOff, outs, nOuts, outOff, count, { a, b -> a.min(b) }, { x, y -> Math.min(x, y) })

    private fun i64Max(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        i64(w, ins, inOff, outs, nOuts, outOff, count, { a, b -> a.max(b) }, { x, y -> Math.max(x, y) })

    private fun i64BitwiseAnd(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        i64(w, ins, inOff, outs, nOuts, outOff, count, { a, b -> a.and(b) }, { x, y -> x and y })

    private fun i64BitwiseOr(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        i64(w, ins, inOff, outs, nOuts, outOff, count, { a, b -> a.or(b) }, { x, y -> x or y })

    private fun i64BitwiseXor(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        i64(w, ins, inOff, outs, nOuts, outOff, count, { a, b -> a.lanewise(jdk.incubator.vector.VectorOperators.XOR, b) }, { x, y -> x xor y })

    private inline fun f64(
        w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long, avg: Boolean,
        vcombine: (DoubleVector, DoubleVector) -> DoubleVector, combine: (Double, Double) -> Double,
    ) {
        val lanes = D.length()
        val div = w.toDouble()
        val vectorEnd = count - count % lanes
        var i = 0L
        while (i < vectorEnd) {
            val ib = (inOff + i) * 8
            var v = DoubleVector.fromMemorySegment(D, ins[0]!!, ib, ORDER)
            for (r in 1 until w) v = vcombine(v, DoubleVector.fromMemorySegment(D, ins[r]!!, ib, ORDER))
            if (avg) v = v.div(div)
            val ob = (outOff + i) * 8
            for (o in 0 until nOuts) v.intoMemorySegment(outs[o]!!, ob, ORDER)
            i += lanes
        }
        while (i < count) {
            val ib = (inOff + i) * 8
            var x = ins[0]!!.get(F64, ib)
            for (r in 1 until w) x = combine(x, ins[r]!!.get(F64, ib))
            if (avg) x /= div
            val ob = (outOff + i) * 8
            for (o in 0 until nOuts) outs[o]!!.set(F64, ob, x)
            i++
        }
    }

    private inline fun i32(
        w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long,
        vcombine: (IntVector, IntVector) -> IntVector, combine: (Int, Int) -> Int,
    ) {
        val lanes = I.length()
        val vectorEnd = count - count % lanes
        var i = 0L
        while (i < vectorEnd) {
            val ib = (inOff + i) * 4
            var v = IntVector.fromMemorySegment(I, ins[0]!!, ib, ORDER)
            for (r in 1 until w) v = vcombine(v, IntVector.fromMemorySegment(I, ins[r]!!, ib, ORDER))
            val ob = (outOff + i) * 4
            for (o in 0 until nOuts) v.intoMemorySegment(outs[o]!!, ob, ORDER)
            i += lanes
        }
        while (i < count) {
            val ib = (inOff + i) * 4
            var x = ins[0]!!.get(I32, ib)
            for (r in 1 until w) x = combine(x, ins[r]!!.get(I32, ib))
            val ob = (outOff + i) * 4
            for (o in 0 until nOuts) outs[o]!!.set(I32, ob, x)
            i++
        }
    }

    private inline fun i64(
        w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long,
        vcombine: (LongVector, LongVector) -> LongVector, combine: (Long, Long) -> Long,
    ) {
        val lanes = L.length()
        val vectorEnd = count - count % lanes
        var i = 0L
        while (i < vectorEnd) {
            val ib = (inOff + i) * 8
            var v = LongVector.fromMemorySegment(L, ins[0]!!, ib, ORDER)
            for (r in 1 until w) v = vcombine(v, LongVector.fromMemorySegment(L, ins[r]!!, ib, ORDER))
            val ob = (outOff + i) * 8
            for (o in 0 until nOuts) v.intoMemorySegment(outs[o]!!, ob, ORDER)
            i += lanes
        }
        while (i < count) {
            val ib = (inOff + i) * 8
            var x = ins[0]!!.get(I64, ib)
            for (r in 1 until w) x = combine(x, ins[r]!!.get(I64, ib))
            val ob = (outOff + i) * 8
            for (o in 0 until nOuts) outs[o]!!.set(I64, ob, x)
            i++
        }
    }

    /** Touches the API once so a broken module shows up as "not available" rather than at the first collective. */
    fun probe(): Boolean = SPECIES.length() > 0

    fun float32(
        op: ReduceOp, w: Int,
        ins: Array<MemorySegment?>, inOff: Long,
        outs: Array<MemorySegment?>, nOuts: Int, outOff: Long,
        count: Long,
    ) {
        // One small method per op (each holding one inlined copy of the loop), so the JIT compiles
        // and intrinsifies each on its own instead of one huge method holding every variant.
        when (op) {
            ReduceOp.Sum -> f32Sum(w, ins, inOff, outs, nOuts, outOff, count)
            ReduceOp.Avg -> f32Avg(w, ins, inOff, outs, nOuts, outOff, count)
            ReduceOp.Product -> f32Prod(w, ins, inOff, outs, nOuts, outOff, count)
            ReduceOp.Min -> f32Min(w, ins, inOff, outs, nOuts, outOff, count)
            ReduceOp.Max -> f32Max(w, ins, inOff, outs, nOuts, outOff, count)
            else -> throw IllegalArgumentException("$op is not defined on Float32")
        }
    }

    private fun f32Sum(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        loop(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.add(b) }, { x, y -> x + y })

    private fun f32Avg(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        loop(w, ins, inOff, outs, nOuts, outOff, count, true, { a, b -> a.add(b) }, { x, y -> x + y })

    private fun f32Prod(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        loop(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.mul(b) }, { x, y -> x * y })

    private fun f32Min(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        loop(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.min(b) }, { x, y -> Math.min(x, y) })

    private fun f32Max(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        loop(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.max(b) }, { x, y -> Math.max(x, y) })

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
