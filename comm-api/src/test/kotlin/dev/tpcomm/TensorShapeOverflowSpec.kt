package dev.tpcomm

import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.lang.foreign.Arena

/**
 * Issue 19, item 6 (held-out fault suite): a shape whose element count overflows a Long is refused
 * with an IllegalArgumentException that says what to change, by every factory and view of Tensor;
 * never a tensor of a wrapped-around size.
 */
class TensorShapeOverflowSpec : FunSpec({
    val huge = intArrayOf(65536, 65536, 65536, 65536) // 2^64 elements: wraps to 0 in Long arithmetic

    test("view of an empty tensor with 65536^4 elements is refused, not a tensor of 0 elements") {
        val e = shouldThrow<IllegalArgumentException> { Tensor.zeros(DType.Float32, 0).view(*huge) }
        e.message!! shouldContain "[65536, 65536, 65536, 65536]"
        e.message!! shouldContain "more than 9223372036854775807 elements"
    }

    test("view of a non-empty tensor with an overflowing shape is refused with the same message") {
        shouldThrow<IllegalArgumentException> { Tensor.zeros(DType.Int8, 16).view(*huge, 16) }.message!! shouldContain "more than 9223372036854775807 elements"
    }

    test("zeros, of, wrap and wrapDevice refuse an overflowing shape, also one with a zero dimension") {
        val messages = listOf(
            shouldThrow<IllegalArgumentException> { Tensor.zeros(DType.Float32, *huge) },
            shouldThrow<IllegalArgumentException> { Tensor.zeros(DType.Float32, 0, *huge) },
            shouldThrow<IllegalArgumentException> { Tensor.of(FloatArray(0), 0, *huge) },
            shouldThrow<IllegalArgumentException> { Tensor.of(IntArray(0), *huge, 0) },
            shouldThrow<IllegalArgumentException> { Arena.ofConfined().use { Tensor.wrap(it.allocate(0), DType.Float32, *huge, 0) } },
            shouldThrow<IllegalArgumentException> { Tensor.wrapDevice(Device.Cuda(0), 0x1000, DType.Float32, 0, *huge) },
        ).map { it.message!! }
        for (m in messages) m shouldContain "more than 9223372036854775807 elements"
    }

    test("a shape whose byte size overflows is refused, saying to split it") {
        val e = shouldThrow<IllegalArgumentException> { Tensor.zeros(DType.Float64, Int.MAX_VALUE, Int.MAX_VALUE, 2) }
        e.message!! shouldContain "bytes"
        e.message!! shouldContain "split"
    }

    test("concat whose joined dimension overflows an Int is refused") {
        val a = Tensor.zeros(DType.Int8, 0, Int.MAX_VALUE)
        val e = shouldThrow<IllegalArgumentException> { Tensor.concat(listOf(a, a), 1) }
        e.message!! shouldContain "dimension 1"
    }

    test("valid shapes, an empty one included, still work") {
        Tensor.zeros(DType.Float32, 0).view(0, 5).shape shouldBe listOf(0, 5)
        Tensor.zeros(DType.Float32, 6).view(2, 3).numel shouldBe 6L
        Tensor.zeros(DType.Float32, 2, 0, 3).numel shouldBe 0L
    }
})
