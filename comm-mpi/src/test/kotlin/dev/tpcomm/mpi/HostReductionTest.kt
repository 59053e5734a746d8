package dev.tpcomm.mpi

import dev.tpcomm.DType
import dev.tpcomm.HalfPrecision
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import java.lang.foreign.ValueLayout

class HostReductionTest : FunSpec({
    test("integer Avg truncates toward zero after the wrapped sum") {
        val t = Tensor.of(intArrayOf(3, -3, 5, -5))
        HostReduction.divide(t.segment, DType.Int32, 4, 2)
        t.toIntArray().toList() shouldBe listOf(1, -1, 2, -2)
        val u = Tensor.zeros(DType.UInt8, 2).also { it.setLong(0, 255); it.setLong(1, 3) }
        HostReduction.divide(u.segment, DType.UInt8, 2, 2)
        u.toLongArray().toList() shouldBe listOf(127L, 1L)
        val b = Tensor.zeros(DType.Int8, 1).also { it.setLong(0, -7) }
        HostReduction.divide(b.segment, DType.Int8, 1, 2)
        b.getLong(0) shouldBe -3L
    }

    test("float Avg divides exactly") {
        val t = Tensor.of(floatArrayOf(3f, 1f))
        HostReduction.divide(t.segment, DType.Float32, 2, 4)
        t.toFloatArray().toList() shouldBe listOf(0.75f, 0.25f)
    }

    test("Float16 and BFloat16 reduce in float32 in rank order, rounded once") {
        for (dtype in listOf(DType.Float16, DType.BFloat16)) {
            val ranks = 3
            val n = 2L
            val blocks = Tensor.zeros(dtype, ranks * n.toInt())
            val values = listOf(listOf(1.5f, -2f), listOf(2.25f, 8f), listOf(0.25f, 0.5f))
            values.forEachIndexed { r, v -> v.forEachIndexed { i, x -> blocks.setFloat(r * n + i, x) } }
            val out = Tensor.zeros(dtype, n.toInt())
            HostReduction.reduceHalves(blocks.segment, ranks, n, dtype, ReduceOp.Sum, out.segment)
            out.toFloatArray().toList() shouldBe listOf(4f, 6.5f)
            HostReduction.reduceHalves(blocks.segment, ranks, n, dtype, ReduceOp.Max, out.segment)
            out.toFloatArray().toList() shouldBe listOf(2.25f, 8f)
            HostReduction.reduceHalves(blocks.segment, ranks, n, dtype, ReduceOp.Min, out.segment)
            out.toFloatArray().toList() shouldBe listOf(0.25f, -2f)
            HostReduction.reduceHalves(blocks.segment, ranks, n, dtype, ReduceOp.Avg, out.segment)
            out.toFloatArray().toList() shouldBe listOf(4f / 3, 6.5f / 3).map { HostReduction.toFloat(dtype, HostReduction.fromFloat(dtype, it)) }
        }
    }

    test("8-bit integer sums wrap around (the host path for libraries that saturate them)") {
        val blocks = Tensor.zeros(DType.Int8, 4).also { it.setLong(0, 126); it.setLong(1, -100); it.setLong(2, 22); it.setLong(3, -50) }
        val out = Tensor.zeros(DType.Int8, 2)
        HostReduction.reduceBlocks(blocks.segment, 2, 2, DType.Int8, ReduceOp.Sum, out.segment)
        out.toLongArray().toList() shouldBe listOf(-108L, 106L)
        HostReduction.reduceBlocks(blocks.segment, 2, 2, DType.Int8, ReduceOp.Avg, out.segment)
        out.toLongArray().toList() shouldBe listOf(-54L, 53L)
        val u = Tensor.zeros(DType.UInt8, 2).also { it.setLong(0, 200); it.setLong(1, 100) }
        val uo = Tensor.zeros(DType.UInt8, 1)
        HostReduction.reduceBlocks(u.segment, 2, 1, DType.UInt8, ReduceOp.Sum, uo.segment)
        uo.getLong(0) shouldBe 44L
        HostReduction.reduceBlocks(u.segment, 2, 1, DType.UInt8, ReduceOp.Avg, uo.segment)
        uo.getLong(0) shouldBe 22L
    }

    test("FP8 reduces in float32 in rank order and rounds once, saturating; Int16 sums wrap") {
        val blocks = Tensor.fromDoubles(DType.Float8E4M3, doubleArrayOf(16.0, 448.0, 1.0, 448.0, 1.0, 1.0, 1.0, 2.0)) // 4 ranks x 2
        val out = Tensor.zeros(DType.Float8E4M3, 2)
        HostReduction.reduceBlocks(blocks.segment, 4, 2, DType.Float8E4M3, ReduceOp.Sum, out.segment)
        out.toDoubleArray().toList() shouldBe listOf(20.0, 448.0) // 19 rounds to even (20); 899 saturates
        HostReduction.reduceBlocks(blocks.segment, 4, 2, DType.Float8E4M3, ReduceOp.Avg, out.segment)
        out.toDoubleArray().toList() shouldBe listOf(5.0, 224.0) // 19 / 4 = 4.75 -> 5 (ties to even); 899.0 / 4 = 224.75 -> 224
        val shorts = Tensor.of(shortArrayOf(32767, -32768, 1, -1))
        val o16 = Tensor.zeros(DType.Int16, 2)
        HostReduction.reduceBlocks(shorts.segment, 2, 2, DType.Int16, ReduceOp.Sum, o16.segment)
        o16.toLongArray().toList() shouldBe listOf(-32768L, 32767L)
        val u32 = Tensor.fromLongs(DType.UInt32, longArrayOf(0xFFFF_FFFCL))
        HostReduction.divide(u32.segment, DType.UInt32, 1, 2)
        u32.getLong(0) shouldBe 0x7FFF_FFFEL
    }

    test("NaN propagates through Min and Max") {
        val blocks = Tensor.zeros(DType.Float16, 2)
        blocks.segment.setAtIndex(ValueLayout.JAVA_SHORT, 0, HalfPrecision.floatToFloat16(Float.NaN))
        blocks.setFloat(1, 1f)
        val out = Tensor.zeros(DType.Float16, 1)
        HostReduction.reduceHalves(blocks.segment, 2, 1, DType.Float16, ReduceOp.Min, out.segment)
        out.getFloat(0).isNaN() shouldBe true
    }
})
