package dev.tpcomm.testkit.kit

import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.testkit.beCloseTo
import dev.tpcomm.testkit.shouldBeCloseTo
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.should
import io.kotest.matchers.shouldNot
import io.kotest.matchers.string.shouldContain

class TensorClosenessTest : FunSpec({
    val expected = Tensor.of(floatArrayOf(1f, 2f, 3f, 4f, 5f, 6f), 2, 3)

    test("within rtol and atol passes") {
        Tensor.of(floatArrayOf(1f, 2.00001f, 3f, 4f, 5f, 6.00001f), 2, 3).shouldBeCloseTo(expected)
        Tensor.of(floatArrayOf(1.1f, 2f, 3f, 4f, 5f, 6f), 2, 3).shouldBeCloseTo(expected, rtol = 0.2, atol = 0.0)
        Tensor.of(floatArrayOf(1.1f, 2f, 3f, 4f, 5f, 6f), 2, 3) shouldNot beCloseTo(expected)
    }

    test("a failure names the worst element: index, actual, expected, error") {
        val actual = Tensor.of(floatArrayOf(1f, 2.01f, 3f, 4f, 5f, 6.5f), 2, 3)
        val e = shouldThrow<AssertionError> { actual.shouldBeCloseTo(expected, rtol = 1e-3, atol = 1e-3) }
        e.message shouldContain "Float32[2, 3] is not close to the expected tensor (rtol = 0.001, atol = 0.001)"
        e.message shouldContain "2 of 6 elements differ"
        e.message shouldContain "worst at [1, 2] (flat index 5): actual 6.5, expected 6.0, error 0.5 > allowed 0.007"
    }

    test("shape or dtype mismatch, NaN and infinities, exact integers") {
        shouldThrow<AssertionError> { Tensor.of(floatArrayOf(1f, 2f, 3f, 4f, 5f, 6f), 3, 2).shouldBeCloseTo(expected) }
            .message shouldContain "expected Float32[2, 3] (dtype and shape must match)"
        shouldThrow<AssertionError> { Tensor.fromDoubles(DType.Float64, doubleArrayOf(1.0, 2.0, 3.0, 4.0, 5.0, 6.0), 2, 3).shouldBeCloseTo(expected) }
            .message shouldContain "Float64[2, 3]"
        val nan = Tensor.of(floatArrayOf(Float.NaN, Float.POSITIVE_INFINITY))
        nan.shouldBeCloseTo(Tensor.of(floatArrayOf(Float.NaN, Float.POSITIVE_INFINITY)), equalNan = true)
        shouldThrow<AssertionError> { nan.shouldBeCloseTo(Tensor.of(floatArrayOf(Float.NaN, Float.POSITIVE_INFINITY))) }
            .message shouldContain "worst at [0] (flat index 0): actual NaN, expected NaN, error infinite"
        shouldThrow<AssertionError> { nan.shouldBeCloseTo(Tensor.of(floatArrayOf(Float.NaN, Float.NEGATIVE_INFINITY)), equalNan = true) }
            .message shouldContain "worst at [1]"
        Tensor.of(longArrayOf(Long.MAX_VALUE, -1)) should beCloseTo(Tensor.of(longArrayOf(Long.MAX_VALUE, -1)))
        shouldThrow<AssertionError> { Tensor.of(longArrayOf(Long.MAX_VALUE, -1)).shouldBeCloseTo(Tensor.of(longArrayOf(Long.MAX_VALUE - 1, -1))) }
            .message shouldContain "worst at [0] (flat index 0): actual 9223372036854775807, expected 9223372036854775806"
        shouldThrow<IllegalArgumentException> { expected.shouldBeCloseTo(expected, rtol = -1.0) }.message shouldContain "must be >= 0"
    }
})
