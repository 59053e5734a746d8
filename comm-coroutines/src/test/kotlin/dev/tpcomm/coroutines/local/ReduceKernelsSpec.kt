package dev.tpcomm.coroutines.local

import dev.tpcomm.DType
import dev.tpcomm.Float8
import dev.tpcomm.HalfPrecision
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import kotlin.random.Random

/** Every ReduceOp on every dtype where it is defined, through allReduce, against a reference fold in rank order. */
class ReduceKernelsSpec : FunSpec({
    fun wrap(dtype: DType, v: Long): Long = when (dtype) {
        DType.Int8 -> v.toByte().toLong()
        DType.UInt8 -> v and 0xFF
        DType.Int16 -> v.toShort().toLong()
        DType.Int32 -> v.toInt().toLong()
        DType.UInt32 -> v and 0xFFFF_FFFFL
        DType.Bool -> if (v != 0L) 1L else 0L
        else -> v
    }

    fun intReference(dtype: DType, op: ReduceOp, values: List<Long>): Long {
        val w = values.size
        if (dtype == DType.Bool) {
            val truths = values.map { it != 0L }
            val v = when (op) {
                ReduceOp.Sum, ReduceOp.Max, ReduceOp.BitwiseOr -> truths.any { it }
                ReduceOp.Product, ReduceOp.Min, ReduceOp.BitwiseAnd -> truths.all { it }
                ReduceOp.BitwiseXor -> truths.count { it } % 2 == 1
                else -> error("$op is not defined on Bool")
            }
            return if (v) 1L else 0L
        }
        val unsigned = Comparator<Long> { a, b -> java.lang.Long.compareUnsigned(a, b) }
        return when (op) {
            ReduceOp.Sum -> wrap(dtype, values.fold(0L) { a, b -> a + b })
            ReduceOp.Avg -> if (dtype == DType.UInt64) java.lang.Long.divideUnsigned(values.fold(0L) { a, b -> a + b }, w.toLong())
                else wrap(dtype, values.fold(0L) { a, b -> a + b }) / w
            ReduceOp.Product -> wrap(dtype, values.fold(1L) { a, b -> a * b })
            ReduceOp.Min -> if (dtype == DType.UInt64) values.minWith(unsigned) else values.min()
            ReduceOp.Max -> if (dtype == DType.UInt64) values.maxWith(unsigned) else values.max()
            ReduceOp.BitwiseAnd -> wrap(dtype, values.reduce { a, b -> a and b })
            ReduceOp.BitwiseOr -> wrap(dtype, values.reduce { a, b -> a or b })
            ReduceOp.BitwiseXor -> wrap(dtype, values.reduce { a, b -> a xor b })
            is ReduceOp.PreMulSum -> error("not an integer op")
        }
    }

    fun floatReference(op: ReduceOp, values: List<Float>): Float = when (op) {
        ReduceOp.Sum -> values.reduce { a, b -> a + b }
        ReduceOp.Avg -> values.reduce { a, b -> a + b } / values.size
        ReduceOp.Product -> values.reduce { a, b -> a * b }
        ReduceOp.Min -> values.reduce { a, b -> Math.min(a, b) }
        ReduceOp.Max -> values.reduce { a, b -> Math.max(a, b) }
        else -> error("not a float op")
    }

    fun doubleReference(op: ReduceOp, values: List<Double>): Double = when (op) {
        ReduceOp.Sum -> values.reduce { a, b -> a + b }
        ReduceOp.Avg -> values.reduce { a, b -> a + b } / values.size
        ReduceOp.Product -> values.reduce { a, b -> a * b }
        ReduceOp.Min -> values.reduce { a, b -> Math.min(a, b) }
        ReduceOp.Max -> values.reduce { a, b -> Math.max(a, b) }
        else -> error("not a float op")
    }

    // 1500 elements cross the 1024-element block and leave a vector tail.
    val n = 1500
    for (dtype in DType.entries) {
        for (op in ReduceOp.entries.filter { it.supports(dtype) }) {
            test("allReduce $op on $dtype, 3 ranks") {
                val w = 3
                val rnd = Random(dtype.ordinal * 31 + op.ordinal)
                // values[r][i]: small integers (exact in every float format), negative ones too
                val values = List(w) { List(n) { (rnd.nextInt(-40, 40)).toLong() } }
                val results = runLocalWorld(w) { comm ->
                    val t = Tensor.zeros(dtype, n)
                    for (i in 0 until n) {
                        if (!dtype.isFloatingPoint) t.setLong(i.toLong(), values[comm.rank][i]) else t.setDouble(i.toLong(), values[comm.rank][i] / 4.0)
                    }
                    comm.allReduce(t, op)
                    List(n) { i -> if (!dtype.isFloatingPoint) t.getLong(i.toLong()) else java.lang.Double.doubleToRawLongBits(t.getDouble(i.toLong())) }
                }
                for (i in 0 until n) {
                    val column = values.map { it[i] }
                    val expected: Long = when (dtype) {
                        DType.Float32 -> java.lang.Double.doubleToRawLongBits(floatReference(op, column.map { it / 4f }).toDouble())
                        DType.Float64 -> java.lang.Double.doubleToRawLongBits(doubleReference(op, column.map { it / 4.0 }))
                        DType.Float16 -> java.lang.Double.doubleToRawLongBits(
                            HalfPrecision.float16ToFloat(HalfPrecision.floatToFloat16(floatReference(op, column.map { it / 4f }))).toDouble(),
                        )
                        DType.BFloat16 -> java.lang.Double.doubleToRawLongBits(
                            HalfPrecision.bfloat16ToFloat(HalfPrecision.floatToBFloat16(floatReference(op, column.map { it / 4f }))).toDouble(),
                        )
                        // FP8: the stored (rounded) inputs, reduced in float32, rounded once with saturation.
                        DType.Float8E4M3, DType.Float8E5M2 -> {
                            fun fp8(x: Double) = Float8.toFloat(dtype, Float8.fromDouble(dtype, x))
                            java.lang.Double.doubleToRawLongBits(fp8(floatReference(op, column.map { fp8(it / 4.0) }).toDouble()).toDouble())
                        }
                        else -> intReference(dtype, op, column.map { wrap(dtype, it) })
                    }
                    for (r in 0 until w) results[r][i] shouldBe expected
                }
            }
        }
    }

    test("Float32: the Vector API kernel and the scalar fallback agree bit for bit") {
        if (!ReduceKernels.vectorAvailable) return@test // nothing to compare without the module
        val rnd = Random(7)
        for (w in listOf(2, 4, 5)) for (op in listOf(ReduceOp.Sum, ReduceOp.Avg, ReduceOp.Product, ReduceOp.Min, ReduceOp.Max)) {
            val n = 1000 + rnd.nextInt(100)
            val ins = List(w) { Tensor.of(FloatArray(n) { rnd.nextFloat() * 4 - 2 }) }
            val a = List(w) { Tensor.zeros(DType.Float32, n) }
            val b = List(w) { Tensor.zeros(DType.Float32, n) }
            val inSegs = Array<java.lang.foreign.MemorySegment?>(w) { ins[it].segment }
            // offsets exercise unaligned starts; w outputs use the unrolled 4-rank path when w == 4
            ReduceKernels.reduce(DType.Float32, op, w, inSegs, 3, Array(w) { a[it].segment }, w, 1, n - 3L)
            ReduceKernels.reduceScalar(DType.Float32, op, w, inSegs, 3, Array(w) { b[it].segment }, w, 1, n - 3L)
            for (r in 0 until w) a[r].contentEquals(b[r]) shouldBe true
        }
    }

    test("Float64, Int32, Int64: the Vector API kernels and the scalar fallback agree bit for bit") {
        if (!ReduceKernels.vectorAvailable) return@test
        val rnd = Random(11)
        for (dtype in listOf(DType.Float64, DType.Int32, DType.Int64)) for (w in listOf(2, 4)) {
            for (op in ReduceOp.entries.filter { it.supports(dtype) }) {
                val n = 600 + rnd.nextInt(50)
                val ins = List(w) { Tensor.zeros(dtype, n).also { t -> for (i in 0 until n) t.setDouble(i.toLong(), rnd.nextInt(-1000, 1000) / 8.0) } }
                val a = List(w) { Tensor.zeros(dtype, n) }
                val b = List(w) { Tensor.zeros(dtype, n) }
                val inSegs = Array<java.lang.foreign.MemorySegment?>(w) { ins[it].segment }
                ReduceKernels.reduce(dtype, op, w, inSegs, 2, Array(w) { a[it].segment }, w, 0, n - 2L)
                ReduceKernels.reduceScalar(dtype, op, w, inSegs, 2, Array(w) { b[it].segment }, w, 0, n - 2L)
                for (r in 0 until w) a[r].contentEquals(b[r]) shouldBe true
            }
        }
    }

    test("Int8, UInt8, BFloat16: the Vector API kernels and the scalar fallback agree bit for bit on random bits") {
        if (!ReduceKernels.vectorAvailable) return@test
        val rnd = Random(13)
        for (dtype in listOf(DType.Int8, DType.UInt8, DType.BFloat16)) for (w in listOf(2, 3, 4)) {
            for (op in ReduceOp.entries.filter { it.supports(dtype) }) {
                val n = 700 + rnd.nextInt(50)
                // random bit patterns: every value of the 8-bit types; for BFloat16 also infinities and NaNs
                val ins = List(w) { Tensor.zeros(dtype, n).also { t -> val b = ByteArray(t.byteSize.toInt()); rnd.nextBytes(b); t.segment.copyFrom(java.lang.foreign.MemorySegment.ofArray(b)) } }
                val a = List(w) { Tensor.zeros(dtype, n) }
                val b = List(w) { Tensor.zeros(dtype, n) }
                val inSegs = Array<java.lang.foreign.MemorySegment?>(w) { ins[it].segment }
                ReduceKernels.reduce(dtype, op, w, inSegs, 3, Array(w) { a[it].segment }, w, 1, n - 3L)
                ReduceKernels.reduceScalar(dtype, op, w, inSegs, 3, Array(w) { b[it].segment }, w, 1, n - 3L)
                for (r in 0 until w) a[r].contentEquals(b[r]) shouldBe true
            }
        }
    }

    test("Avg on integers: wrapped sum divided with truncation toward zero") {
        suspend fun avg(dtype: DType, vararg v: Long): Long = runLocalWorld(v.size) { comm ->
            val t = Tensor.zeros(dtype, 1).also { it.setLong(0, v[comm.rank]) }
            comm.allReduce(t, ReduceOp.Avg).getLong(0)
        }.first()
        avg(DType.Int32, 1, 2) shouldBe 1
        avg(DType.Int32, -1, -2) shouldBe -1
        avg(DType.Int8, 100, 100) shouldBe -28 // 200 wraps to -56
        avg(DType.UInt8, 200, 100) shouldBe 22 // 300 wraps to 44
        avg(DType.Int64, Long.MAX_VALUE, 1) shouldBe Long.MIN_VALUE / 2
    }

    test("Float16 and BFloat16 round the float32 result once, to nearest even") {
        // 1 + 2^-11 is a tie in float16: rounds to 1.0; 1 + 3*2^-11 rounds up to 1 + 2^-9.
        val f16 = runLocalWorld(2) { comm ->
            val t = Tensor.zeros(DType.Float16, 2)
            if (comm.rank == 0) { t.setDouble(0, 1.0); t.setDouble(1, 1.0) } else {
                t.segment.set(java.lang.foreign.ValueLayout.JAVA_SHORT_UNALIGNED, 0, HalfPrecision.floatToFloat16(Math.scalb(1f, -11)))
                t.segment.set(java.lang.foreign.ValueLayout.JAVA_SHORT_UNALIGNED, 2, HalfPrecision.floatToFloat16(3 * Math.scalb(1f, -11)))
            }
            comm.allReduce(t).toFloatArray().toList()
        }.first()
        f16 shouldBe listOf(1f, 1f + Math.scalb(1f, -9))
        val bf = runLocalWorld(3) { comm ->
            // 256 + 1 + 1: bfloat16 has 8 significant bits; the float32 sum 258 is exact in bfloat16,
            // while rounding after every step would give 256 + 1 -> 256, + 1 -> 256.
            val t = Tensor.zeros(DType.BFloat16, 1).also { it.setDouble(0, if (comm.rank == 0) 256.0 else 1.0) }
            comm.allReduce(t).getDouble(0)
        }.first()
        bf shouldBe 258.0
    }

    test("large reductions take the parallel path and match the reference") {
        val n2 = 300_000 // 1.2 MB per rank of float32: above the parallel threshold
        for (dtype in listOf(DType.Float32, DType.Int32, DType.BFloat16)) {
            val res = runLocalWorld(4) { comm ->
                val t = Tensor.zeros(dtype, n2)
                for (i in 0 until n2) t.setLong(i.toLong(), ((i % 7) + comm.rank).toLong())
                comm.allReduce(t)
                val rs = Tensor.zeros(dtype, n2 / 4)
                comm.reduceScatterInto(rs, t, ReduceOp.Max)
                val rsDim = comm.reduceScatter(t.view(n2 / 4, 4), ReduceOp.Sum, 1)
                Triple(t.toLongArray(), rs.toLongArray(), rsDim.toLongArray())
            }
            for (r in 0 until 4) {
                val (all, rs, rsDim) = res[r]
                for (i in 0 until n2) all[i] shouldBe ((i % 7) * 4 + 6).toLong()
                for (j in rs.indices) rs[j] shouldBe ((((r * n2 / 4) + j) % 7) * 4 + 6).toLong()
                for (row in 0 until n2 / 4) rsDim[row] shouldBe all[row * 4 + r] * 4
            }
        }
    }
})
