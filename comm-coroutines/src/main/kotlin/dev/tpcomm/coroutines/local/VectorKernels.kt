package dev.tpcomm.coroutines.local

import dev.tpcomm.ReduceOp
import dev.tpcomm.DType
import dev.tpcomm.HalfPrecision
import jdk.incubator.vector.ByteVector
import jdk.incubator.vector.DoubleVector
import jdk.incubator.vector.FloatVector
import jdk.incubator.vector.IntVector
import jdk.incubator.vector.LongVector
import jdk.incubator.vector.ShortVector
import jdk.incubator.vector.VectorOperators
import jdk.incubator.vector.VectorShape
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
    private val B: VectorSpecies<Byte> = ByteVector.SPECIES_PREFERRED

    // BFloat16: half-width shorts widened to ints of the float species' shape (same lane count).
    private val BF_F: VectorSpecies<Float> = FloatVector.SPECIES_PREFERRED
    private val BF_I: VectorSpecies<Int> = IntVector.SPECIES_PREFERRED
    private val BF_S: VectorSpecies<Short> = VectorSpecies.of(java.lang.Short.TYPE, VectorShape.forBitSize(BF_F.vectorBitSize() / 2))
    private val I16 = ValueLayout.JAVA_SHORT_UNALIGNED

    /**
     * Whether [other] has a vector kernel for [op] on [dtype]: Float64 and BFloat16 for every op;
     * Int32, Int64, Int8 and UInt8 for all but Avg (and, on Int64, Product), whose lane-wise division
     * or multiplication x86 lacks. The rest (Float16, integer Avg) takes the scalar block path.
     */
    fun supports(dtype: DType, op: ReduceOp): Boolean = when (dtype) {
        DType.Float64 -> true
        DType.Int32 -> op != ReduceOp.Avg
        DType.Int64 -> op != ReduceOp.Avg && op != ReduceOp.Product
        DType.Int8, DType.UInt8 -> op != ReduceOp.Avg
        DType.BFloat16 -> true
        else -> false
    }

    /** Vector reductions of Float64, Int32, Int64, Int8, UInt8 and BFloat16 (see [supports]). */
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
            DType.Int8, DType.UInt8 -> int8(op, dtype == DType.UInt8, w, ins, inOff, outs, nOuts, outOff, count)
            DType.BFloat16 -> when (op) {
                ReduceOp.Sum -> bf16Sum(w, ins, inOff, outs, nOuts, outOff, count)
                ReduceOp.Avg -> bf16Avg(w, ins, inOff, outs, nOuts, outOff, count)
                ReduceOp.Product -> bf16Product(w, ins, inOff, outs, nOuts, outOff, count)
                ReduceOp.Min -> bf16Min(w, ins, inOff, outs, nOuts, outOff, count)
                ReduceOp.Max -> bf16Max(w, ins, inOff, outs, nOuts, outOff, count)
                else -> throw IllegalArgumentException("$op is not defined on BFloat16")
            }
            else -> throw IllegalArgumentException("no vector kernel for $dtype")
        }
    }

    // ---- Int8 / UInt8: byte lanes wrap like the scalar path's truncating store ----

    private fun int8(op: ReduceOp, unsigned: Boolean, w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) {
        when (op) {
            ReduceOp.Sum -> i8Sum(w, ins, inOff, outs, nOuts, outOff, count)
            ReduceOp.Product -> i8Product(w, ins, inOff, outs, nOuts, outOff, count)
            // UInt8 compares 0..255: flipping the sign bit maps that order onto signed bytes.
            ReduceOp.Min -> i8Min(unsigned, w, ins, inOff, outs, nOuts, outOff, count)
            ReduceOp.Max -> i8Max(unsigned, w, ins, inOff, outs, nOuts, outOff, count)
            ReduceOp.BitwiseAnd -> i8And(w, ins, inOff, outs, nOuts, outOff, count)
            ReduceOp.BitwiseOr -> i8Or(w, ins, inOff, outs, nOuts, outOff, count)
            ReduceOp.BitwiseXor -> i8Xor(w, ins, inOff, outs, nOuts, outOff, count)
            else -> throw IllegalArgumentException("no vector kernel for $op on 8-bit integers")
        }
    }

    private fun i8Sum(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        i8(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.add(b) }, { x, y -> x + y })

    private fun i8Product(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        i8(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.mul(b) }, { x, y -> x * y })

    private fun i8Min(unsigned: Boolean, w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        i8(w, ins, inOff, outs, nOuts, outOff, count, unsigned, { a, b -> a.min(b) }, { x, y -> Math.min(x, y) })

    private fun i8Max(unsigned: Boolean, w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        i8(w, ins, inOff, outs, nOuts, outOff, count, unsigned, { a, b -> a.max(b) }, { x, y -> Math.max(x, y) })

    private fun i8And(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        i8(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.and(b) }, { x, y -> x and y })

    private fun i8Or(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        i8(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.or(b) }, { x, y -> x or y })

    private fun i8Xor(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        i8(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.lanewise(VectorOperators.XOR, b) }, { x, y -> x xor y })

    /** [flip]: XOR every value with 0x80 before combining and the result after (unsigned min/max). */
    private inline fun i8(
        w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long, flip: Boolean,
        vcombine: (ByteVector, ByteVector) -> ByteVector, combine: (Int, Int) -> Int,
    ) {
        val lanes = B.length()
        val vectorEnd = count - count % lanes
        val f = if (flip) (-128).toByte() else 0
        var i = 0L
        if (w in 2..4) {
            // Straight-line per rank count (see the Float32 loop): no vector carried around a rank loop.
            val in0 = ins[0]!!; val in1 = ins[1]!!
            val in2 = if (w > 2) ins[2]!! else in1
            val in3 = if (w > 3) ins[3]!! else in1
            when (w) {
                2 -> while (i < vectorEnd) {
                    val ib = inOff + i
                    var v = vcombine(i8Load(in0, ib, flip, f), i8Load(in1, ib, flip, f))
                    if (flip) v = v.lanewise(VectorOperators.XOR, f)
                    val ob = outOff + i
                    for (o in 0 until nOuts) v.intoMemorySegment(outs[o]!!, ob, ORDER)
                    i += lanes
                }
                3 -> while (i < vectorEnd) {
                    val ib = inOff + i
                    var v = vcombine(vcombine(i8Load(in0, ib, flip, f), i8Load(in1, ib, flip, f)), i8Load(in2, ib, flip, f))
                    if (flip) v = v.lanewise(VectorOperators.XOR, f)
                    val ob = outOff + i
                    for (o in 0 until nOuts) v.intoMemorySegment(outs[o]!!, ob, ORDER)
                    i += lanes
                }
                else -> while (i < vectorEnd) {
                    val ib = inOff + i
                    var v = vcombine(
                        vcombine(vcombine(i8Load(in0, ib, flip, f), i8Load(in1, ib, flip, f)), i8Load(in2, ib, flip, f)),
                        i8Load(in3, ib, flip, f),
                    )
                    if (flip) v = v.lanewise(VectorOperators.XOR, f)
                    val ob = outOff + i
                    for (o in 0 until nOuts) v.intoMemorySegment(outs[o]!!, ob, ORDER)
                    i += lanes
                }
            }
        }
        while (i < vectorEnd) {
            val ib = inOff + i
            var v = ByteVector.fromMemorySegment(B, ins[0]!!, ib, ORDER)
            if (flip) v = v.lanewise(VectorOperators.XOR, f)
            for (r in 1 until w) {
                var x = ByteVector.fromMemorySegment(B, ins[r]!!, ib, ORDER)
                if (flip) x = x.lanewise(VectorOperators.XOR, f)
                v = vcombine(v, x)
            }
            if (flip) v = v.lanewise(VectorOperators.XOR, f)
            val ob = outOff + i
            for (o in 0 until nOuts) v.intoMemorySegment(outs[o]!!, ob, ORDER)
            i += lanes
        }
        val fi = f.toInt()
        while (i < count) {
            val ib = inOff + i
            var x = ins[0]!!.get(ValueLayout.JAVA_BYTE, ib).toInt() xor fi
            for (r in 1 until w) x = combine(x, ins[r]!!.get(ValueLayout.JAVA_BYTE, ib).toInt() xor fi)
            val b = (x xor fi).toByte()
            val ob = outOff + i
            for (o in 0 until nOuts) outs[o]!!.set(ValueLayout.JAVA_BYTE, ob, b)
            i++
        }
    }

    @Suppress("NOTHING_TO_INLINE")
    private inline fun i8Load(seg: MemorySegment, off: Long, flip: Boolean, f: Byte): ByteVector {
        val v = ByteVector.fromMemorySegment(B, seg, off, ORDER)
        return if (flip) v.lanewise(VectorOperators.XOR, f) else v
    }

    // ---- BFloat16: widen to float32 lanes, combine, round once to nearest even (as HalfPrecision) ----

    private fun bf16Sum(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        bf16(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.add(b) }, { x, y -> x + y })

    private fun bf16Avg(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        bf16(w, ins, inOff, outs, nOuts, outOff, count, true, { a, b -> a.add(b) }, { x, y -> x + y })

    private fun bf16Product(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        bf16(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.mul(b) }, { x, y -> x * y })

    private fun bf16Min(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        bf16(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.min(b) }, { x, y -> Math.min(x, y) })

    private fun bf16Max(w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) =
        bf16(w, ins, inOff, outs, nOuts, outOff, count, false, { a, b -> a.max(b) }, { x, y -> Math.max(x, y) })

    private fun bfLoad(seg: MemorySegment, byteOff: Long): FloatVector =
        (ShortVector.fromMemorySegment(BF_S, seg, byteOff, ORDER).convertShape(VectorOperators.S2I, BF_I, 0) as IntVector)
            .lanewise(VectorOperators.LSHL, 16).reinterpretAsFloats()

    private fun bfRound(v: FloatVector): ShortVector {
        val bits = v.reinterpretAsInts()
        val hi = bits.lanewise(VectorOperators.LSHR, 16)
        val rounded = bits.add(hi.and(1).add(0x7FFF)).lanewise(VectorOperators.LSHR, 16)
        val out = rounded.blend(hi.or(0x40), v.test(VectorOperators.IS_NAN).cast(BF_I))
        return out.convertShape(VectorOperators.I2S, BF_S, 0) as ShortVector
    }

    private inline fun bf16(
        w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long, avg: Boolean,
        vcombine: (FloatVector, FloatVector) -> FloatVector, combine: (Float, Float) -> Float,
    ) {
        val lanes = BF_F.length()
        val div = w.toFloat()
        val vectorEnd = count - count % lanes
        var i = 0L
        if (w in 2..4) {
            // Straight-line per rank count (see the Float32 loop): no vector carried around a rank loop.
            val in0 = ins[0]!!; val in1 = ins[1]!!
            val in2 = if (w > 2) ins[2]!! else in1
            val in3 = if (w > 3) ins[3]!! else in1
            when (w) {
                2 -> while (i < vectorEnd) {
                    val ib = (inOff + i) * 2
                    var v = vcombine(bfLoad(in0, ib), bfLoad(in1, ib))
                    if (avg) v = v.div(div)
                    val h = bfRound(v)
                    val ob = (outOff + i) * 2
                    for (o in 0 until nOuts) h.intoMemorySegment(outs[o]!!, ob, ORDER)
                    i += lanes
                }
                3 -> while (i < vectorEnd) {
                    val ib = (inOff + i) * 2
                    var v = vcombine(vcombine(bfLoad(in0, ib), bfLoad(in1, ib)), bfLoad(in2, ib))
                    if (avg) v = v.div(div)
                    val h = bfRound(v)
                    val ob = (outOff + i) * 2
                    for (o in 0 until nOuts) h.intoMemorySegment(outs[o]!!, ob, ORDER)
                    i += lanes
                }
                else -> while (i < vectorEnd) {
                    val ib = (inOff + i) * 2
                    var v = vcombine(vcombine(vcombine(bfLoad(in0, ib), bfLoad(in1, ib)), bfLoad(in2, ib)), bfLoad(in3, ib))
                    if (avg) v = v.div(div)
                    val h = bfRound(v)
                    val ob = (outOff + i) * 2
                    for (o in 0 until nOuts) h.intoMemorySegment(outs[o]!!, ob, ORDER)
                    i += lanes
                }
            }
        }
        while (i < vectorEnd) {
            val ib = (inOff + i) * 2
            var v = bfLoad(ins[0]!!, ib)
            for (r in 1 until w) v = vcombine(v, bfLoad(ins[r]!!, ib))
            if (avg) v = v.div(div)
            val h = bfRound(v)
            val ob = (outOff + i) * 2
            for (o in 0 until nOuts) h.intoMemorySegment(outs[o]!!, ob, ORDER)
            i += lanes
        }
        while (i < count) {
            val ib = (inOff + i) * 2
            var x = HalfPrecision.bfloat16ToFloat(ins[0]!!.get(I16, ib))
            for (r in 1 until w) x = combine(x, HalfPrecision.bfloat16ToFloat(ins[r]!!.get(I16, ib)))
            if (avg) x /= div
            val h = HalfPrecision.floatToBFloat16(x)
            val ob = (outOff + i) * 2
            for (o in 0 until nOuts) outs[o]!!.set(I16, ob, h)
            i++
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
        } else if (w == 2 && nOuts == 2 && !avg) {
            // All-reduce over two ranks, unrolled the same way.
            val in1 = ins[1]!!
            val o0 = outs[0]!!; val o1 = outs[1]!!
            while (i < vectorEnd) {
                val ib = (inOff + i) * 4
                val ob = (outOff + i) * 4
                val v = vcombine(FloatVector.fromMemorySegment(SPECIES, in0, ib, ORDER), FloatVector.fromMemorySegment(SPECIES, in1, ib, ORDER))
                v.intoMemorySegment(o0, ob, ORDER)
                v.intoMemorySegment(o1, ob, ORDER)
                i += lanes
            }
        } else if (w in 2..4) {
            // Up to four ranks (reduce, reduce-scatter, three ranks, averages): one straight-line loop
            // per rank count, so no vector value is carried around an inner loop over ranks (which
            // the JIT would box).
            val in1 = ins[1]!!
            val in2 = if (w > 2) ins[2]!! else in1
            val in3 = if (w > 3) ins[3]!! else in1
            when (w) {
                2 -> while (i < vectorEnd) {
                    val ib = (inOff + i) * 4
                    var v = vcombine(FloatVector.fromMemorySegment(SPECIES, in0, ib, ORDER), FloatVector.fromMemorySegment(SPECIES, in1, ib, ORDER))
                    if (avg) v = v.div(div)
                    val ob = (outOff + i) * 4
                    for (o in 0 until nOuts) v.intoMemorySegment(outs[o]!!, ob, ORDER)
                    i += lanes
                }
                3 -> while (i < vectorEnd) {
                    val ib = (inOff + i) * 4
                    var v = vcombine(
                        vcombine(FloatVector.fromMemorySegment(SPECIES, in0, ib, ORDER), FloatVector.fromMemorySegment(SPECIES, in1, ib, ORDER)),
                        FloatVector.fromMemorySegment(SPECIES, in2, ib, ORDER),
                    )
                    if (avg) v = v.div(div)
                    val ob = (outOff + i) * 4
                    for (o in 0 until nOuts) v.intoMemorySegment(outs[o]!!, ob, ORDER)
                    i += lanes
                }
                else -> while (i < vectorEnd) {
                    val ib = (inOff + i) * 4
                    var v = vcombine(
                        vcombine(
                            vcombine(FloatVector.fromMemorySegment(SPECIES, in0, ib, ORDER), FloatVector.fromMemorySegment(SPECIES, in1, ib, ORDER)),
                            FloatVector.fromMemorySegment(SPECIES, in2, ib, ORDER),
                        ),
                        FloatVector.fromMemorySegment(SPECIES, in3, ib, ORDER),
                    )
                    if (avg) v = v.div(div)
                    val ob = (outOff + i) * 4
                    for (o in 0 until nOuts) v.intoMemorySegment(outs[o]!!, ob, ORDER)
                    i += lanes
                }
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
