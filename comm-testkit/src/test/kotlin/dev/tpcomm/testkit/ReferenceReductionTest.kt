package dev.tpcomm.testkit

import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.shouldNotBe
import io.kotest.matchers.string.shouldContain

class ReferenceReductionTest : FunSpec({
    test("integer sums and products wrap at the dtype's width") {
        ReferenceReduction.reduceLong(DType.Int8, ReduceOp.Sum, longArrayOf(100, 100)) shouldBe -56
        ReferenceReduction.reduceLong(DType.UInt8, ReduceOp.Sum, longArrayOf(200, 100)) shouldBe 44
        ReferenceReduction.reduceLong(DType.Int32, ReduceOp.Product, longArrayOf(65536, 65536)) shouldBe 0
        ReferenceReduction.reduceLong(DType.Int64, ReduceOp.Sum, longArrayOf(Long.MAX_VALUE, 1)) shouldBe Long.MIN_VALUE
    }

    test("integer Avg truncates the wrapped sum toward zero") {
        ReferenceReduction.reduceLong(DType.Int32, ReduceOp.Avg, longArrayOf(1, 2)) shouldBe 1
        ReferenceReduction.reduceLong(DType.Int32, ReduceOp.Avg, longArrayOf(-1, -2)) shouldBe -1
        ReferenceReduction.reduceLong(DType.Int8, ReduceOp.Avg, longArrayOf(100, 100)) shouldBe -28
        ReferenceReduction.reduceLong(DType.UInt8, ReduceOp.Avg, longArrayOf(255, 3, 0)) shouldBe 0
    }

    test("min and max compare UInt8 unsigned and the bitwise ops act on bits") {
        ReferenceReduction.reduceLong(DType.UInt8, ReduceOp.Max, longArrayOf(200, 100)) shouldBe 200
        ReferenceReduction.reduceLong(DType.Int8, ReduceOp.Min, longArrayOf(-128, 127)) shouldBe -128
        ReferenceReduction.reduceLong(DType.Int32, ReduceOp.BitwiseXor, longArrayOf(0b1100, 0b1010)) shouldBe 0b0110
        ReferenceReduction.reduceLong(DType.UInt8, ReduceOp.BitwiseOr, longArrayOf(0x80, 0x01)) shouldBe 0x81
    }

    test("the dtypes of issue 22: unsigned compare and divide, Int16 wraps, Bool is logical") {
        ReferenceReduction.reduceLong(DType.UInt32, ReduceOp.Max, longArrayOf(0xF000_0000L, 5)) shouldBe 0xF000_0000L
        ReferenceReduction.reduceLong(DType.UInt32, ReduceOp.Avg, longArrayOf(0xFFFF_FFFEL, 0xFFFF_FFFEL)) shouldBe 0x7FFF_FFFEL
        ReferenceReduction.reduceLong(DType.UInt64, ReduceOp.Min, longArrayOf(-1L, 3L)) shouldBe 3L
        ReferenceReduction.reduceLong(DType.UInt64, ReduceOp.Avg, longArrayOf(-2L, 0L)) shouldBe Long.MAX_VALUE
        ReferenceReduction.reduceLong(DType.Int16, ReduceOp.Sum, longArrayOf(32767, 1)) shouldBe -32768
        ReferenceReduction.reduceLong(DType.Bool, ReduceOp.Sum, longArrayOf(1, 0, 0)) shouldBe 1
        ReferenceReduction.reduceLong(DType.Bool, ReduceOp.Product, longArrayOf(1, 0, 1)) shouldBe 0
        ReferenceReduction.reduceLong(DType.Bool, ReduceOp.BitwiseXor, longArrayOf(1, 1, 1)) shouldBe 1
        val fp8 = Tensor.fromDoubles(DType.Float8E4M3, doubleArrayOf(16.0))
        val ones = Tensor.fromDoubles(DType.Float8E4M3, doubleArrayOf(1.0))
        // NCCL's pairwise rounding (16) and the host's single rounding (20) are both within FP8's tolerance of 19.
        for (v in listOf(16.0, 20.0)) {
            ReferenceReduction.firstMismatch(ReduceOp.Sum, listOf(fp8, ones, ones, ones), Tensor.fromDoubles(DType.Float8E4M3, doubleArrayOf(v))) shouldBe null
        }
    }

    test("float tolerance grows with the rank count and the unit roundoff, and is zero for min and max") {
        val values = doubleArrayOf(1.0, -1.0, 0.5)
        ReferenceReduction.tolerance(DType.Float32, ReduceOp.Sum, values) shouldBe (2.0 * 4 * Math.ulp(1.0f) / 2 * 2.5 + 3 * java.lang.Float.MIN_VALUE.toDouble())
        ReferenceReduction.tolerance(DType.Float16, ReduceOp.Max, values) shouldBe 0.0
        (ReferenceReduction.tolerance(DType.BFloat16, ReduceOp.Sum, values) > ReferenceReduction.tolerance(DType.Float16, ReduceOp.Sum, values)) shouldBe true
    }

    test("firstMismatch accepts the reference and names the first wrong element") {
        val a = Tensor.of(intArrayOf(1, 2, 3))
        val b = Tensor.of(intArrayOf(10, 20, 30))
        ReferenceReduction.firstMismatch(ReduceOp.Sum, listOf(a, b), Tensor.of(intArrayOf(11, 22, 33))) shouldBe null
        ReferenceReduction.firstMismatch(ReduceOp.Sum, listOf(a, b), Tensor.of(intArrayOf(11, 23, 34)))!! shouldContain "2 of 3 elements wrong; first: element 1 is 23"
        ReferenceReduction.firstMismatch(ReduceOp.Sum, listOf(a, b), Tensor.of(intArrayOf(11, 22))) shouldNotBe null
    }

    test("a float result off by more than the tolerance is caught, within it accepted") {
        val x = Tensor.fromDoubles(DType.Float32, doubleArrayOf(1.0))
        val y = Tensor.fromDoubles(DType.Float32, doubleArrayOf(2.0))
        ReferenceReduction.firstMismatch(ReduceOp.Sum, listOf(x, y), Tensor.fromDoubles(DType.Float32, doubleArrayOf(3.0 + 1e-7))) shouldBe null
        ReferenceReduction.firstMismatch(ReduceOp.Sum, listOf(x, y), Tensor.fromDoubles(DType.Float32, doubleArrayOf(3.001))) shouldNotBe null
        ReferenceReduction.expected(ReduceOp.Avg, listOf(x, y)).getDouble(0) shouldBe 1.5
    }
})
