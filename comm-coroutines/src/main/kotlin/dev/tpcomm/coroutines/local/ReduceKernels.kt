package dev.tpcomm.coroutines.local

import dev.tpcomm.DType
import dev.tpcomm.Float8
import dev.tpcomm.HalfPrecision
import dev.tpcomm.ReduceOp
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

/**
 * Element-wise reductions across the ranks' buffers, for every dtype and [ReduceOp].
 *
 * One call reduces `count` elements: it reads `ins[0..w)` at element offset `inOff` and writes the
 * result into `outs[0..nOuts)` at element offset `outOff`. Every input element is read once and
 * every output element written once; the reduction folds ranks in rank order. The result at an
 * index is computed from all inputs before any output at that index is written, so an output may
 * be one of the inputs (in place).
 *
 * Float32, Float64, Int32, Int64, Int8, UInt8 and BFloat16 go through [VectorKernels] when the `jdk.incubator.vector`
 * module is present (see [VectorKernels.supports] for the few ops left to the scalar path). The other
 * paths move blocks of [BLOCK] elements between the segments and small per-thread heap arrays (which
 * stay in L1 and which the JIT vectorizes), combine there, and copy the result out.
 * Float16/BFloat16 compute in float32 and round once to nearest even at the end; so do the FP8
 * types, whose final rounding saturates to the largest finite value ([dev.tpcomm.Float8]).
 * UInt32/UInt64 Sum, Product and the bitwise ops share Int32/Int64's kernels (the same bits);
 * their Min, Max and Avg compare and divide unsigned. Bool is one byte, 0 or not: or, and, xor,
 * written back as 0 or 1.
 */
internal object ReduceKernels {
    const val BLOCK: Int = 1024

    private val F32 = ValueLayout.JAVA_FLOAT_UNALIGNED
    private val F64 = ValueLayout.JAVA_DOUBLE_UNALIGNED
    private val I16 = ValueLayout.JAVA_SHORT_UNALIGNED
    private val I32 = ValueLayout.JAVA_INT_UNALIGNED
    private val I64 = ValueLayout.JAVA_LONG_UNALIGNED
    private val I8 = ValueLayout.JAVA_BYTE

    /** True when the Vector API module is in the boot layer (run with `--add-modules=jdk.incubator.vector`). */
    val vectorAvailable: Boolean = try {
        ModuleLayer.boot().findModule("jdk.incubator.vector").isPresent &&
            System.getProperty("tpcomm.local.vector", "true") != "false" && VectorKernels.probe()
    } catch (_: Throwable) {
        false
    }

    private class Scratch {
        val fa = FloatArray(BLOCK); val fb = FloatArray(BLOCK)
        val da = DoubleArray(BLOCK); val db = DoubleArray(BLOCK)
        val ia = IntArray(BLOCK); val ib = IntArray(BLOCK)
        val la = LongArray(BLOCK); val lb = LongArray(BLOCK)
        val sa = ShortArray(BLOCK); val sb = ShortArray(BLOCK)
        val ba = ByteArray(BLOCK); val bb = ByteArray(BLOCK)
    }

    private val scratch = ThreadLocal.withInitial { Scratch() }

    /** Fewer elements than this are reduced by the scalar loop, never by the vector kernels (see [reduce]). */
    const val VECTOR_MIN_COUNT: Long = 64

    /**
     * Reduces with [op]; for [ReduceOp.PreMulSum], [factors] holds each rank's factor already in the
     * dtype ([ReduceOp.PreMulSum.factorIn]), index = input, since ranks may pass different factors.
     */
    fun reduce(
        dtype: DType, op: ReduceOp, w: Int,
        ins: Array<MemorySegment?>, inOff: Long,
        outs: Array<MemorySegment?>, nOuts: Int, outOff: Long,
        count: Long,
        factors: DoubleArray? = null,
    ) {
        if (count <= 0) return
        if (op is ReduceOp.PreMulSum) {
            preMulSum(scratch.get(), dtype, requireNotNull(factors) { "PreMulSum needs every rank's factor" }, w, ins, inOff, outs, nOuts, outOff, count)
            return
        }
        if (count < VECTOR_MIN_COUNT) {
            // A few elements: the scalar loop (the same bits: each element is combined in the same
            // order). The vector kernels then see only counts their vector loops run on: a kernel
            // compiled while it saw only short counts has its vector loop compiled as an uncommon trap,
            // and the first large call deoptimised it (unstable_if), running the Vector API in the
            // interpreter for hundreds of milliseconds (SizeSwitchDeoptTest).
            reduceScalar(dtype, op, w, ins, inOff, outs, nOuts, outOff, count)
            return
        }
        if (dtype == DType.Float32 && vectorAvailable) {
            VectorKernels.float32(op, w, ins, inOff, outs, nOuts, outOff, count)
            return
        }
        if (vectorAvailable) {
            val kernel = sameBits(dtype, op)
            if (VectorKernels.supports(kernel, op)) {
                VectorKernels.other(kernel, op, w, ins, inOff, outs, nOuts, outOff, count)
                return
            }
        }
        reduceScalar(dtype, op, w, ins, inOff, outs, nOuts, outOff, count)
    }

    /** The signed dtype whose kernel gives the same bits: UInt32/UInt64 under Sum, Product and the bitwise ops (wrapping arithmetic is sign-agnostic). */
    private fun sameBits(dtype: DType, op: ReduceOp): DType {
        val signAgnostic = op == ReduceOp.Sum || op == ReduceOp.Product || op.isBitwise
        return when {
            dtype == DType.UInt32 && signAgnostic -> DType.Int32
            dtype == DType.UInt64 && signAgnostic -> DType.Int64
            else -> dtype
        }
    }

    /** [reduce] without the Vector API (the path taken when the module is absent). */
    fun reduceScalar(
        dtype: DType, op: ReduceOp, w: Int,
        ins: Array<MemorySegment?>, inOff: Long,
        outs: Array<MemorySegment?>, nOuts: Int, outOff: Long,
        count: Long,
        factors: DoubleArray? = null,
    ) {
        val s = scratch.get()
        if (op is ReduceOp.PreMulSum) {
            preMulSum(s, dtype, requireNotNull(factors) { "PreMulSum needs every rank's factor" }, w, ins, inOff, outs, nOuts, outOff, count)
            return
        }
        when (dtype) {
            DType.Float32 -> float32(s, op, w, ins, inOff, outs, nOuts, outOff, count)
            DType.Float64 -> float64(s, op, w, ins, inOff, outs, nOuts, outOff, count)
            DType.Float16, DType.BFloat16 -> half(s, dtype == DType.BFloat16, op, w, ins, inOff, outs, nOuts, outOff, count)
            DType.Int32 -> int32(s, op, w, false, ins, inOff, outs, nOuts, outOff, count)
            DType.Int64 -> int64(s, op, w, false, ins, inOff, outs, nOuts, outOff, count)
            DType.UInt32 -> int32(s, op, w, true, ins, inOff, outs, nOuts, outOff, count)
            DType.UInt64 -> int64(s, op, w, true, ins, inOff, outs, nOuts, outOff, count)
            DType.Int8 -> int8(s, op, w, false, ins, inOff, outs, nOuts, outOff, count)
            DType.UInt8 -> int8(s, op, w, true, ins, inOff, outs, nOuts, outOff, count)
            DType.Int16 -> int16(s, op, w, ins, inOff, outs, nOuts, outOff, count)
            DType.Float8E4M3, DType.Float8E5M2 -> float8(s, dtype, op, w, ins, inOff, outs, nOuts, outOff, count)
            DType.Bool -> bool(s, op, w, ins, inOff, outs, nOuts, outOff, count)
        }
    }

    // ---- float32 ----

    private inline fun f32Loop(
        s: Scratch, w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long,
        count: Long, avg: Boolean, combine: (Float, Float) -> Float,
    ) {
        val a = s.fa; val b = s.fb
        var done = 0L
        val div = w.toFloat()
        while (done < count) {
            val n = minOf(BLOCK.toLong(), count - done).toInt()
            val ib = (inOff + done) * 4
            MemorySegment.copy(ins[0]!!, F32, ib, a, 0, n)
            for (r in 1 until w) {
                MemorySegment.copy(ins[r]!!, F32, ib, b, 0, n)
                for (j in 0 until n) a[j] = combine(a[j], b[j])
            }
            if (avg) for (j in 0 until n) a[j] = a[j] / div
            val ob = (outOff + done) * 4
            for (o in 0 until nOuts) MemorySegment.copy(a, 0, outs[o]!!, F32, ob, n)
            done += n
        }
    }

    private fun float32(s: Scratch, op: ReduceOp, w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) {
        when (op) {
            ReduceOp.Sum -> f32Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> x + y }
            ReduceOp.Avg -> f32Loop(s, w, ins, inOff, outs, nOuts, outOff, count, true) { x, y -> x + y }
            ReduceOp.Product -> f32Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> x * y }
            ReduceOp.Min -> f32Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> Math.min(x, y) }
            ReduceOp.Max -> f32Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> Math.max(x, y) }
            else -> throw IllegalArgumentException("$op is not defined on Float32")
        }
    }

    // ---- float64 ----

    private inline fun f64Loop(
        s: Scratch, w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long,
        count: Long, avg: Boolean, combine: (Double, Double) -> Double,
    ) {
        val a = s.da; val b = s.db
        var done = 0L
        val div = w.toDouble()
        while (done < count) {
            val n = minOf(BLOCK.toLong(), count - done).toInt()
            val ib = (inOff + done) * 8
            MemorySegment.copy(ins[0]!!, F64, ib, a, 0, n)
            for (r in 1 until w) {
                MemorySegment.copy(ins[r]!!, F64, ib, b, 0, n)
                for (j in 0 until n) a[j] = combine(a[j], b[j])
            }
            if (avg) for (j in 0 until n) a[j] = a[j] / div
            val ob = (outOff + done) * 8
            for (o in 0 until nOuts) MemorySegment.copy(a, 0, outs[o]!!, F64, ob, n)
            done += n
        }
    }

    private fun float64(s: Scratch, op: ReduceOp, w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) {
        when (op) {
            ReduceOp.Sum -> f64Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> x + y }
            ReduceOp.Avg -> f64Loop(s, w, ins, inOff, outs, nOuts, outOff, count, true) { x, y -> x + y }
            ReduceOp.Product -> f64Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> x * y }
            ReduceOp.Min -> f64Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> Math.min(x, y) }
            ReduceOp.Max -> f64Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> Math.max(x, y) }
            else -> throw IllegalArgumentException("$op is not defined on Float64")
        }
    }

    // ---- float16 / bfloat16: compute in float32, round once ----

    private inline fun halfLoop(
        s: Scratch, bf: Boolean, w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long,
        count: Long, avg: Boolean, combine: (Float, Float) -> Float,
    ) {
        val a = s.fa; val h = s.sa
        var done = 0L
        val div = w.toFloat()
        while (done < count) {
            val n = minOf(BLOCK.toLong(), count - done).toInt()
            val ib = (inOff + done) * 2
            MemorySegment.copy(ins[0]!!, I16, ib, h, 0, n)
            if (bf) for (j in 0 until n) a[j] = HalfPrecision.bfloat16ToFloat(h[j])
            else for (j in 0 until n) a[j] = java.lang.Float.float16ToFloat(h[j])
            for (r in 1 until w) {
                MemorySegment.copy(ins[r]!!, I16, ib, h, 0, n)
                if (bf) for (j in 0 until n) a[j] = combine(a[j], HalfPrecision.bfloat16ToFloat(h[j]))
                else for (j in 0 until n) a[j] = combine(a[j], java.lang.Float.float16ToFloat(h[j]))
            }
            if (avg) for (j in 0 until n) a[j] = a[j] / div
            if (bf) for (j in 0 until n) h[j] = HalfPrecision.floatToBFloat16(a[j])
            else for (j in 0 until n) h[j] = java.lang.Float.floatToFloat16(a[j])
            val ob = (outOff + done) * 2
            for (o in 0 until nOuts) MemorySegment.copy(h, 0, outs[o]!!, I16, ob, n)
            done += n
        }
    }

    private fun half(s: Scratch, bf: Boolean, op: ReduceOp, w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) {
        when (op) {
            ReduceOp.Sum -> halfLoop(s, bf, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> x + y }
            ReduceOp.Avg -> halfLoop(s, bf, w, ins, inOff, outs, nOuts, outOff, count, true) { x, y -> x + y }
            ReduceOp.Product -> halfLoop(s, bf, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> x * y }
            ReduceOp.Min -> halfLoop(s, bf, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> Math.min(x, y) }
            ReduceOp.Max -> halfLoop(s, bf, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> Math.max(x, y) }
            else -> throw IllegalArgumentException("$op is not defined on ${if (bf) "BFloat16" else "Float16"}")
        }
    }

    // ---- PreMulSum: Σ_r round(x_r · f_r), one pass over the inputs ----

    /**
     * [ReduceOp.PreMulSum] on a floating-point dtype, modelled on NCCL's `FuncPreMulSum`
     * (NVIDIA/nccl `src/device/reduce_kernel.h`): each input element is multiplied by its rank's
     * factor (`factors[r]`, already in the dtype) and the product rounded to the dtype
     * (`Apply_PreOp`: `x * scalar` in `T`, `__hmul` for half/bfloat16), then the products are summed
     * in rank order (`Apply_Reduce` dispatches to `FuncSum`). Float16/BFloat16 sum in float32 and
     * round once, as [ReduceOp.Sum] does here; a product of two halves is exact in float32, so
     * rounding it to the dtype is NCCL's `__hmul`.
     */
    private fun preMulSum(
        s: Scratch, dtype: DType, factors: DoubleArray, w: Int, ins: Array<MemorySegment?>, inOff: Long,
        outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long,
    ) {
        when (dtype) {
            DType.Float32 -> {
                val a = s.fa; val b = s.fb
                var done = 0L
                while (done < count) {
                    val n = minOf(BLOCK.toLong(), count - done).toInt()
                    val ib = (inOff + done) * 4
                    MemorySegment.copy(ins[0]!!, F32, ib, a, 0, n)
                    val f0 = factors[0].toFloat()
                    for (j in 0 until n) a[j] = a[j] * f0
                    for (r in 1 until w) {
                        MemorySegment.copy(ins[r]!!, F32, ib, b, 0, n)
                        val f = factors[r].toFloat()
                        for (j in 0 until n) a[j] = a[j] + b[j] * f
                    }
                    val ob = (outOff + done) * 4
                    for (o in 0 until nOuts) MemorySegment.copy(a, 0, outs[o]!!, F32, ob, n)
                    done += n
                }
            }
            DType.Float64 -> {
                val a = s.da; val b = s.db
                var done = 0L
                while (done < count) {
                    val n = minOf(BLOCK.toLong(), count - done).toInt()
                    val ib = (inOff + done) * 8
                    MemorySegment.copy(ins[0]!!, F64, ib, a, 0, n)
                    val f0 = factors[0]
                    for (j in 0 until n) a[j] = a[j] * f0
                    for (r in 1 until w) {
                        MemorySegment.copy(ins[r]!!, F64, ib, b, 0, n)
                        val f = factors[r]
                        for (j in 0 until n) a[j] = a[j] + b[j] * f
                    }
                    val ob = (outOff + done) * 8
                    for (o in 0 until nOuts) MemorySegment.copy(a, 0, outs[o]!!, F64, ob, n)
                    done += n
                }
            }
            DType.Float16, DType.BFloat16 -> {
                val bf = dtype == DType.BFloat16
                val a = s.fa; val h = s.sa
                var done = 0L
                while (done < count) {
                    val n = minOf(BLOCK.toLong(), count - done).toInt()
                    val ib = (inOff + done) * 2
                    for (r in 0 until w) {
                        MemorySegment.copy(ins[r]!!, I16, ib, h, 0, n)
                        val f = factors[r].toFloat()
                        if (bf) {
                            for (j in 0 until n) {
                                val p = HalfPrecision.bfloat16ToFloat(HalfPrecision.floatToBFloat16(HalfPrecision.bfloat16ToFloat(h[j]) * f))
                                a[j] = if (r == 0) p else a[j] + p
                            }
                        } else {
                            for (j in 0 until n) {
                                val p = java.lang.Float.float16ToFloat(java.lang.Float.floatToFloat16(java.lang.Float.float16ToFloat(h[j]) * f))
                                a[j] = if (r == 0) p else a[j] + p
                            }
                        }
                    }
                    if (bf) for (j in 0 until n) h[j] = HalfPrecision.floatToBFloat16(a[j])
                    else for (j in 0 until n) h[j] = java.lang.Float.floatToFloat16(a[j])
                    val ob = (outOff + done) * 2
                    for (o in 0 until nOuts) MemorySegment.copy(h, 0, outs[o]!!, I16, ob, n)
                    done += n
                }
            }
            else -> throw IllegalArgumentException("PreMulSum is not defined on $dtype")
        }
    }

    // ---- int32 ----

    private inline fun i32Loop(
        s: Scratch, w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long,
        count: Long, avg: Boolean, combine: (Int, Int) -> Int, unsigned: Boolean = false,
    ) {
        val a = s.ia; val b = s.ib
        var done = 0L
        while (done < count) {
            val n = minOf(BLOCK.toLong(), count - done).toInt()
            val ib = (inOff + done) * 4
            MemorySegment.copy(ins[0]!!, I32, ib, a, 0, n)
            for (r in 1 until w) {
                MemorySegment.copy(ins[r]!!, I32, ib, b, 0, n)
                for (j in 0 until n) a[j] = combine(a[j], b[j])
            }
            if (avg) {
                if (unsigned) for (j in 0 until n) a[j] = Integer.divideUnsigned(a[j], w) else for (j in 0 until n) a[j] = a[j] / w
            }
            val ob = (outOff + done) * 4
            for (o in 0 until nOuts) MemorySegment.copy(a, 0, outs[o]!!, I32, ob, n)
            done += n
        }
    }

    /** Int32, or UInt32 when [unsigned] (Min/Max compare unsigned, Avg divides unsigned). */
    private fun int32(s: Scratch, op: ReduceOp, w: Int, unsigned: Boolean, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) {
        when (op) {
            ReduceOp.Sum -> i32Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false, { x, y -> x + y })
            ReduceOp.Avg -> i32Loop(s, w, ins, inOff, outs, nOuts, outOff, count, true, { x, y -> x + y }, unsigned)
            ReduceOp.Product -> i32Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false, { x, y -> x * y })
            ReduceOp.Min -> if (unsigned) i32Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false, { x, y -> if (Integer.compareUnsigned(x, y) <= 0) x else y })
                else i32Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false, { x, y -> Math.min(x, y) })
            ReduceOp.Max -> if (unsigned) i32Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false, { x, y -> if (Integer.compareUnsigned(x, y) >= 0) x else y })
                else i32Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false, { x, y -> Math.max(x, y) })
            ReduceOp.BitwiseAnd -> i32Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false, { x, y -> x and y })
            ReduceOp.BitwiseOr -> i32Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false, { x, y -> x or y })
            ReduceOp.BitwiseXor -> i32Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false, { x, y -> x xor y })
            is ReduceOp.PreMulSum -> throw IllegalArgumentException("PreMulSum is not defined on Int32")
        }
    }

    // ---- int64 ----

    private inline fun i64Loop(
        s: Scratch, w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long,
        count: Long, avg: Boolean, combine: (Long, Long) -> Long, unsigned: Boolean = false,
    ) {
        val a = s.la; val b = s.lb
        var done = 0L
        val div = w.toLong()
        while (done < count) {
            val n = minOf(BLOCK.toLong(), count - done).toInt()
            val ib = (inOff + done) * 8
            MemorySegment.copy(ins[0]!!, I64, ib, a, 0, n)
            for (r in 1 until w) {
                MemorySegment.copy(ins[r]!!, I64, ib, b, 0, n)
                for (j in 0 until n) a[j] = combine(a[j], b[j])
            }
            if (avg) {
                if (unsigned) for (j in 0 until n) a[j] = java.lang.Long.divideUnsigned(a[j], div) else for (j in 0 until n) a[j] = a[j] / div
            }
            val ob = (outOff + done) * 8
            for (o in 0 until nOuts) MemorySegment.copy(a, 0, outs[o]!!, I64, ob, n)
            done += n
        }
    }

    /** Int64, or UInt64 when [unsigned] (Min/Max compare unsigned, Avg divides unsigned). */
    private fun int64(s: Scratch, op: ReduceOp, w: Int, unsigned: Boolean, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) {
        when (op) {
            ReduceOp.Sum -> i64Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false, { x, y -> x + y })
            ReduceOp.Avg -> i64Loop(s, w, ins, inOff, outs, nOuts, outOff, count, true, { x, y -> x + y }, unsigned)
            ReduceOp.Product -> i64Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false, { x, y -> x * y })
            ReduceOp.Min -> if (unsigned) i64Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false, { x, y -> if (java.lang.Long.compareUnsigned(x, y) <= 0) x else y })
                else i64Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false, { x, y -> Math.min(x, y) })
            ReduceOp.Max -> if (unsigned) i64Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false, { x, y -> if (java.lang.Long.compareUnsigned(x, y) >= 0) x else y })
                else i64Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false, { x, y -> Math.max(x, y) })
            ReduceOp.BitwiseAnd -> i64Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false, { x, y -> x and y })
            ReduceOp.BitwiseOr -> i64Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false, { x, y -> x or y })
            ReduceOp.BitwiseXor -> i64Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false, { x, y -> x xor y })
            is ReduceOp.PreMulSum -> throw IllegalArgumentException("PreMulSum is not defined on Int64")
        }
    }

    // ---- int8 / uint8: combine in Int on the raw bits, the store truncates (wraps) ----

    private inline fun i8Loop(
        s: Scratch, w: Int, unsigned: Boolean, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long,
        count: Long, avg: Boolean, combine: (Int, Int) -> Int,
    ) {
        val a = s.ia; val bytes = s.ba
        var done = 0L
        while (done < count) {
            val n = minOf(BLOCK.toLong(), count - done).toInt()
            val ib = inOff + done
            MemorySegment.copy(ins[0]!!, I8, ib, bytes, 0, n)
            if (unsigned) for (j in 0 until n) a[j] = bytes[j].toInt() and 0xFF else for (j in 0 until n) a[j] = bytes[j].toInt()
            for (r in 1 until w) {
                MemorySegment.copy(ins[r]!!, I8, ib, bytes, 0, n)
                if (unsigned) for (j in 0 until n) a[j] = combine(a[j], bytes[j].toInt() and 0xFF)
                else for (j in 0 until n) a[j] = combine(a[j], bytes[j].toInt())
            }
            if (avg) {
                // The wrapped-around sum in the dtype's range, divided with truncation toward zero.
                if (unsigned) for (j in 0 until n) a[j] = (a[j] and 0xFF) / w
                else for (j in 0 until n) a[j] = a[j].toByte().toInt() / w
            }
            val out = s.bb
            for (j in 0 until n) out[j] = a[j].toByte()
            val ob = outOff + done
            for (o in 0 until nOuts) MemorySegment.copy(out, 0, outs[o]!!, I8, ob, n)
            done += n
        }
    }

    private fun int8(s: Scratch, op: ReduceOp, w: Int, unsigned: Boolean, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) {
        // Min/Max compare the values in the dtype's range: signed for Int8, 0..255 for UInt8 (loaded so above).
        // Sum and Product keep full Int precision per block of ranks but are truncated on store: wrapping.
        when (op) {
            ReduceOp.Sum -> i8Loop(s, w, unsigned, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> x + y }
            ReduceOp.Avg -> i8Loop(s, w, unsigned, ins, inOff, outs, nOuts, outOff, count, true) { x, y -> x + y }
            ReduceOp.Product -> i8Loop(s, w, unsigned, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> (x * y) and 0xFF }
            ReduceOp.Min -> i8Loop(s, w, unsigned, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> Math.min(x, y) }
            ReduceOp.Max -> i8Loop(s, w, unsigned, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> Math.max(x, y) }
            ReduceOp.BitwiseAnd -> i8Loop(s, w, unsigned, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> x and y }
            ReduceOp.BitwiseOr -> i8Loop(s, w, unsigned, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> x or y }
            ReduceOp.BitwiseXor -> i8Loop(s, w, unsigned, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> x xor y }
            is ReduceOp.PreMulSum -> throw IllegalArgumentException("PreMulSum is not defined on Int8/UInt8")
        }
    }

    // ---- int16: combine in Int, the store truncates (wraps) ----

    private inline fun i16Loop(
        s: Scratch, w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long,
        count: Long, avg: Boolean, combine: (Int, Int) -> Int,
    ) {
        val a = s.ia; val h = s.sa
        var done = 0L
        while (done < count) {
            val n = minOf(BLOCK.toLong(), count - done).toInt()
            val ib = (inOff + done) * 2
            MemorySegment.copy(ins[0]!!, I16, ib, h, 0, n)
            for (j in 0 until n) a[j] = h[j].toInt()
            for (r in 1 until w) {
                MemorySegment.copy(ins[r]!!, I16, ib, h, 0, n)
                for (j in 0 until n) a[j] = combine(a[j], h[j].toInt())
            }
            // Avg: the wrapped-around sum in Int16's range, divided with truncation toward zero.
            if (avg) for (j in 0 until n) a[j] = a[j].toShort().toInt() / w
            val out = s.sb
            for (j in 0 until n) out[j] = a[j].toShort()
            val ob = (outOff + done) * 2
            for (o in 0 until nOuts) MemorySegment.copy(out, 0, outs[o]!!, I16, ob, n)
            done += n
        }
    }

    private fun int16(s: Scratch, op: ReduceOp, w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) {
        when (op) {
            ReduceOp.Sum -> i16Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> (x + y).toShort().toInt() }
            ReduceOp.Avg -> i16Loop(s, w, ins, inOff, outs, nOuts, outOff, count, true) { x, y -> (x + y).toShort().toInt() }
            ReduceOp.Product -> i16Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> (x * y).toShort().toInt() }
            ReduceOp.Min -> i16Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> Math.min(x, y) }
            ReduceOp.Max -> i16Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> Math.max(x, y) }
            ReduceOp.BitwiseAnd -> i16Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> x and y }
            ReduceOp.BitwiseOr -> i16Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> x or y }
            ReduceOp.BitwiseXor -> i16Loop(s, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> x xor y }
            is ReduceOp.PreMulSum -> throw IllegalArgumentException("PreMulSum is not defined on Int16")
        }
    }

    // ---- FP8: widen through a 256-entry table, compute in float32, round once (saturating) ----

    private val E4M3_TABLE = FloatArray(256) { Float8.e4m3ToFloat(it.toByte()) }
    private val E5M2_TABLE = FloatArray(256) { Float8.e5m2ToFloat(it.toByte()) }

    private inline fun f8Loop(
        s: Scratch, e4m3: Boolean, w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long,
        count: Long, avg: Boolean, combine: (Float, Float) -> Float,
    ) {
        val a = s.fa; val bytes = s.ba
        val table = if (e4m3) E4M3_TABLE else E5M2_TABLE
        var done = 0L
        val div = w.toFloat()
        while (done < count) {
            val n = minOf(BLOCK.toLong(), count - done).toInt()
            val ib = inOff + done
            MemorySegment.copy(ins[0]!!, I8, ib, bytes, 0, n)
            for (j in 0 until n) a[j] = table[bytes[j].toInt() and 0xFF]
            for (r in 1 until w) {
                MemorySegment.copy(ins[r]!!, I8, ib, bytes, 0, n)
                for (j in 0 until n) a[j] = combine(a[j], table[bytes[j].toInt() and 0xFF])
            }
            if (avg) for (j in 0 until n) a[j] = a[j] / div
            val out = s.bb
            if (e4m3) for (j in 0 until n) out[j] = Float8.toE4M3(a[j]) else for (j in 0 until n) out[j] = Float8.toE5M2(a[j])
            val ob = outOff + done
            for (o in 0 until nOuts) MemorySegment.copy(out, 0, outs[o]!!, I8, ob, n)
            done += n
        }
    }

    private fun float8(s: Scratch, dtype: DType, op: ReduceOp, w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) {
        val e4m3 = dtype == DType.Float8E4M3
        when (op) {
            ReduceOp.Sum -> f8Loop(s, e4m3, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> x + y }
            ReduceOp.Avg -> f8Loop(s, e4m3, w, ins, inOff, outs, nOuts, outOff, count, true) { x, y -> x + y }
            ReduceOp.Product -> f8Loop(s, e4m3, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> x * y }
            ReduceOp.Min -> f8Loop(s, e4m3, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> Math.min(x, y) }
            ReduceOp.Max -> f8Loop(s, e4m3, w, ins, inOff, outs, nOuts, outOff, count, false) { x, y -> Math.max(x, y) }
            else -> throw IllegalArgumentException("$op is not defined on $dtype")
        }
    }

    // ---- Bool: truth values 0/1 (any non-zero byte is true), written back as 0 or 1 ----

    private inline fun boolLoop(
        s: Scratch, w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long,
        count: Long, combine: (Int, Int) -> Int,
    ) {
        val a = s.ia; val bytes = s.ba
        var done = 0L
        while (done < count) {
            val n = minOf(BLOCK.toLong(), count - done).toInt()
            val ib = inOff + done
            MemorySegment.copy(ins[0]!!, I8, ib, bytes, 0, n)
            for (j in 0 until n) a[j] = if (bytes[j].toInt() != 0) 1 else 0
            for (r in 1 until w) {
                MemorySegment.copy(ins[r]!!, I8, ib, bytes, 0, n)
                for (j in 0 until n) a[j] = combine(a[j], if (bytes[j].toInt() != 0) 1 else 0)
            }
            val out = s.bb
            for (j in 0 until n) out[j] = a[j].toByte()
            val ob = outOff + done
            for (o in 0 until nOuts) MemorySegment.copy(out, 0, outs[o]!!, I8, ob, n)
            done += n
        }
    }

    private fun bool(s: Scratch, op: ReduceOp, w: Int, ins: Array<MemorySegment?>, inOff: Long, outs: Array<MemorySegment?>, nOuts: Int, outOff: Long, count: Long) {
        when (op) {
            ReduceOp.Sum, ReduceOp.Max, ReduceOp.BitwiseOr -> boolLoop(s, w, ins, inOff, outs, nOuts, outOff, count) { x, y -> x or y }
            ReduceOp.Product, ReduceOp.Min, ReduceOp.BitwiseAnd -> boolLoop(s, w, ins, inOff, outs, nOuts, outOff, count) { x, y -> x and y }
            ReduceOp.BitwiseXor -> boolLoop(s, w, ins, inOff, outs, nOuts, outOff, count) { x, y -> x xor y }
            else -> throw IllegalArgumentException("$op is not defined on Bool")
        }
    }
}
