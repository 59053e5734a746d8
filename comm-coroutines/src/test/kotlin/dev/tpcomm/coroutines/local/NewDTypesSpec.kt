package dev.tpcomm.coroutines.local

import dev.tpcomm.DType
import dev.tpcomm.Float8
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain

/**
 * The dtypes of issue 22, item 7, as a user calls them on the local backend: UInt32/UInt64 compare
 * and divide unsigned, FP8 reduces in float32 and rounds once (saturating), Bool reduces logically,
 * Int16 wraps. Each case runs on 1500 elements (crossing the 1024-element block of the kernels).
 */
class NewDTypesSpec : FunSpec({
    val n = 1500

    test("UInt32 Max and Min compare unsigned: values above 2^31 are the largest") {
        val out = runLocalWorld(2) { c ->
            val mine = if (c.rank == 0) 0x8000_0001L else 5L
            val max = Tensor.fromLongs(DType.UInt32, LongArray(n) { mine })
            val min = Tensor.fromLongs(DType.UInt32, LongArray(n) { mine })
            c.allReduce(max, ReduceOp.Max)
            c.allReduce(min, ReduceOp.Min)
            max.toLongArray().toSet() to min.toLongArray().toSet()
        }
        out.forEach { (max, min) -> max shouldBe setOf(0x8000_0001L); min shouldBe setOf(5L) }
    }

    test("UInt32 Avg divides the wrapped sum unsigned; Sum wraps modulo 2^32") {
        val out = runLocalWorld(2) { c ->
            val avg = Tensor.fromLongs(DType.UInt32, LongArray(n) { 0xFFFF_FFFEL })
            val sum = Tensor.fromLongs(DType.UInt32, LongArray(n) { 0xFFFF_FFFEL })
            c.allReduce(avg, ReduceOp.Avg)
            c.allReduce(sum, ReduceOp.Sum)
            avg.getLong(0) to sum.getLong(n - 1L)
        }
        // 2 * 0xFFFFFFFE wraps to 0xFFFFFFFC; unsigned / 2 = 0x7FFFFFFE (signed it would be -4 / 2 = 0xFFFFFFFE).
        out.forEach { it shouldBe (0x7FFF_FFFEL to 0xFFFF_FFFCL) }
    }

    test("UInt64 Max compares unsigned and Avg divides unsigned") {
        val out = runLocalWorld(3) { c ->
            val mine = if (c.rank == 1) Long.MIN_VALUE else 7L // 2^63 as a ULong
            val max = Tensor.fromLongs(DType.UInt64, LongArray(n) { mine })
            c.allReduce(max, ReduceOp.Max)
            val avg = Tensor.fromLongs(DType.UInt64, LongArray(n) { if (c.rank == 1) -3L else 0L }) // 2^64 - 3
            c.allReduce(avg, ReduceOp.Avg)
            max.getLong(n - 1L) to avg.getLong(0)
        }
        out.forEach { it shouldBe (Long.MIN_VALUE to java.lang.Long.divideUnsigned(-3L, 3L)) }
    }

    test("Float8E4M3 sums compute in float32 and round once (16 + 1 + 1 + 1 = 20, not 16)") {
        val out = runLocalWorld(4) { c ->
            val t = Tensor.fromDoubles(DType.Float8E4M3, DoubleArray(n) { if (c.rank == 0) 16.0 else 1.0 })
            c.allReduce(t, ReduceOp.Sum)
            t.toDoubleArray().toSet()
        }
        // 19 is halfway between 18 and 20 and rounds to even (20); rounding after each step would stay at 16.
        out.forEach { it shouldBe setOf(20.0) }
    }

    test("Float8E4M3 results saturate at 448 and Float8E5M2 at 57344 (CUDA's __NV_SATFINITE); Avg divides before rounding") {
        val out = runLocalWorld(2) { c ->
            val e4 = Tensor.fromDoubles(DType.Float8E4M3, DoubleArray(n) { 448.0 })
            val e5 = Tensor.fromDoubles(DType.Float8E5M2, DoubleArray(n) { 57344.0 })
            val avg = Tensor.fromDoubles(DType.Float8E4M3, DoubleArray(n) { 448.0 }) // 896 / 2, not saturate(896) / 2 = 224
            c.allReduce(e4, ReduceOp.Sum)
            c.allReduce(e5, ReduceOp.Sum)
            c.allReduce(avg, ReduceOp.Avg)
            Triple(e4.getDouble(0), e5.getDouble(n - 1L), avg.getDouble(0))
        }
        out.forEach { it shouldBe Triple(448.0, 57344.0, 448.0) }
    }

    test("Bool: Sum and Max are a logical or, Product and Min a logical and, BitwiseXor an xor; Avg is refused") {
        val out = runLocalWorld(3) { c ->
            fun t() = Tensor.of(BooleanArray(n) { i -> (i + c.rank) % 3 == 0 }) // exactly one rank true at each index
            val results = listOf(ReduceOp.Sum, ReduceOp.Max, ReduceOp.Product, ReduceOp.Min, ReduceOp.BitwiseOr, ReduceOp.BitwiseAnd, ReduceOp.BitwiseXor)
                .associateWith { op -> c.allReduce(t(), op).toBooleanArray().toSet() }
            val avg = shouldThrow<IllegalArgumentException> { c.allReduce(t(), ReduceOp.Avg) }
            results to avg.message!!
        }
        out.forEach { (results, message) ->
            results shouldBe mapOf(
                ReduceOp.Sum to setOf(true), ReduceOp.Max to setOf(true), ReduceOp.Product to setOf(false), ReduceOp.Min to setOf(false),
                ReduceOp.BitwiseOr to setOf(true), ReduceOp.BitwiseAnd to setOf(false), ReduceOp.BitwiseXor to setOf(true),
            )
            message shouldContain "Avg is not defined on Bool"
        }
    }

    test("Bool results are 0 or 1 even when an input byte is another non-zero value") {
        val out = runLocalWorld(2) { c ->
            val t = Tensor.fromLongs(DType.UInt8, LongArray(4) { if (c.rank == 0) 2L else 0L })
            val b = Tensor.wrap(t.segment, DType.Bool, 4)
            c.allReduce(b, ReduceOp.Sum)
            t.toLongArray().toList()
        }
        out.forEach { it shouldBe listOf(1L, 1L, 1L, 1L) }
    }

    test("Int16 sums wrap around; Max compares signed") {
        val out = runLocalWorld(2) { c ->
            val sum = Tensor.of(ShortArray(n) { if (c.rank == 0) Short.MAX_VALUE else 1 })
            val max = Tensor.of(ShortArray(n) { if (c.rank == 0) -5 else 3 })
            c.allReduce(sum)
            c.allReduce(max, ReduceOp.Max)
            sum.getLong(0) to max.getLong(n - 1L)
        }
        out.forEach { it shouldBe (-32768L to 3L) }
    }

    test("FP8 conversions follow cuda_fp8.hpp: round to nearest even, saturate, subnormals, NaN") {
        Float8.e4m3ToFloat(Float8.toE4M3(17.0)) shouldBe 16f // tie, even mantissa
        Float8.e4m3ToFloat(Float8.toE4M3(1e9)) shouldBe 448f
        Float8.e4m3ToFloat(Float8.toE4M3(Double.NEGATIVE_INFINITY)) shouldBe -448f
        Float8.e5m2ToFloat(Float8.toE5M2(Double.POSITIVE_INFINITY)) shouldBe 57344f
        Float8.e4m3ToFloat(Float8.toE4M3(Math.scalb(1.0, -9))) shouldBe Math.scalb(1f, -9) // smallest subnormal
        Float8.e4m3ToFloat(Float8.toE4M3(Math.scalb(1.0, -10))) shouldBe 0f // half of it: tie to even (zero)
        Float8.toE4M3(Double.NaN) shouldBe 0x7F.toByte()
        Float8.e4m3ToFloat(0x7F).isNaN() shouldBe true
        Float8.e5m2ToFloat(0x7C) shouldBe Float.POSITIVE_INFINITY
        // Every finite bit pattern round-trips.
        for (b in 0 until 256) {
            val e4 = Float8.e4m3ToFloat(b.toByte())
            if (!e4.isNaN()) Float8.toE4M3(e4) shouldBe b.toByte()
            val e5 = Float8.e5m2ToFloat(b.toByte())
            if (!e5.isNaN() && !e5.isInfinite()) Float8.toE5M2(e5) shouldBe b.toByte()
        }
    }
})
