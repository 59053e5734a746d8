package dev.tpcomm.testkit

import dev.tpcomm.DType
import dev.tpcomm.Tensor
import io.kotest.matchers.Matcher
import io.kotest.matchers.MatcherResult
import io.kotest.matchers.should
import kotlin.math.abs

/**
 * Default tolerances per dtype, as `(rtol, atol)`: PyTorch's `torch.testing.assert_close` defaults
 * (`_DTYPE_PRECISIONS` in pytorch/pytorch `torch/testing/_comparison.py`): Float16 (1e-3, 1e-5),
 * BFloat16 (1.6e-2, 1e-5), Float32 (1.3e-6, 1e-5), Float64 (1e-7, 1e-7); integers and Bool exact
 * (0, 0). PyTorch has none for FP8: one unit in the last place of the format, relative, and its
 * smallest subnormal, absolute: Float8E4M3 (0.125, 2^-9), Float8E5M2 (0.25, 2^-16).
 */
public fun defaultTolerance(dtype: DType): Pair<Double, Double> = when (dtype) {
    DType.Float8E4M3 -> 0.125 to Math.scalb(1.0, -9)
    DType.Float8E5M2 -> 0.25 to Math.scalb(1.0, -16)
    DType.Float16 -> 1e-3 to 1e-5
    DType.BFloat16 -> 1.6e-2 to 1e-5
    DType.Float32 -> 1.3e-6 to 1e-5
    DType.Float64 -> 1e-7 to 1e-7
    else -> 0.0 to 0.0
}

/**
 * A Kotest matcher: the tensor has [expected]'s shape and dtype and every element `a` is close to
 * its expected `e`, `|a - e| <= atol + rtol * |e|` (NumPy's `isclose` and PyTorch's `assert_close`).
 * [rtol] and [atol] default to [defaultTolerance] of [expected]'s dtype.
 *
 * Infinities are close only to the same infinity. NaN is close to NaN only with [equalNan]; any
 * other NaN (in either tensor) is a mismatch. Integer tensors are compared exactly by value (as
 * Long) when both tolerances are 0.
 *
 * The failure message says how many elements differ and names the worst one (largest error):
 * its index (per dimension and flat), the actual and the expected value, the error and the
 * allowed error. Both tensors must be host tensors (read with [Tensor.getDouble]); neither is changed.
 */
public fun beCloseTo(expected: Tensor, rtol: Double? = null, atol: Double? = null, equalNan: Boolean = false): Matcher<Tensor> {
    val (defaultRtol, defaultAtol) = defaultTolerance(expected.dtype)
    val r = rtol ?: defaultRtol
    val a = atol ?: defaultAtol
    require(r >= 0.0 && a >= 0.0) { "beCloseTo: rtol and atol must be >= 0, got rtol = $r, atol = $a" }
    return Matcher { actual -> TensorComparison.compare(actual, expected, r, a, equalNan) }
}

/**
 * Asserts that this tensor is close to [expected]: same shape and dtype, every element within
 * `atol + rtol * |expected|` (see [beCloseTo]; the tolerances default to the dtype's
 * [defaultTolerance]). On failure, throws an `AssertionError` naming the worst element, for example
 *
 * ```
 * Float32[4, 3] is not close to the expected tensor (rtol = 1.3E-6, atol = 1.0E-5): 2 of 12 elements differ;
 * worst at [2, 1] (flat index 7): actual 0.52, expected 0.5, error 0.02 > allowed 1.0650E-5
 * ```
 *
 * Returns this tensor, for chaining.
 */
public fun Tensor.shouldBeCloseTo(expected: Tensor, rtol: Double? = null, atol: Double? = null, equalNan: Boolean = false): Tensor {
    this should beCloseTo(expected, rtol, atol, equalNan)
    return this
}

/** The element-by-element comparison behind [beCloseTo]. */
internal object TensorComparison {
    private fun index(flat: Long, shape: List<Int>): List<Long> {
        val out = LongArray(shape.size)
        var rest = flat
        for (d in shape.indices.reversed()) {
            val size = shape[d].toLong()
            out[d] = if (size == 0L) 0 else rest % size
            rest = if (size == 0L) 0 else rest / size
        }
        return out.toList()
    }

    /** Element [i] at its dtype's precision (a Float32 element as a Float, not as its Double expansion). */
    fun show(t: Tensor, i: Long): String = when {
        !t.dtype.isFloatingPoint -> t.getLong(i).toString()
        t.dtype == DType.Float64 -> t.getDouble(i).toString()
        else -> t.getFloat(i).toString()
    }

    fun compare(actual: Tensor, expected: Tensor, rtol: Double, atol: Double, equalNan: Boolean): MatcherResult {
        val tol = "rtol = $rtol, atol = $atol"
        if (actual.shape != expected.shape || actual.dtype != expected.dtype) {
            return MatcherResult(
                false,
                { "${actual.dtype}${actual.shape} is not close to the expected tensor: expected ${expected.dtype}${expected.shape} (dtype and shape must match)" },
                { "${actual.dtype}${actual.shape} should not have been close to the expected tensor" },
            )
        }
        val exactIntegers = !actual.dtype.isFloatingPoint && rtol == 0.0 && atol == 0.0
        var wrong = 0L
        var worst = -1L
        var worstError = -1.0
        var worstAllowed = 0.0
        for (i in 0 until actual.numel) {
            val error: Double
            val allowed: Double
            if (exactIntegers) {
                val x = actual.getLong(i)
                val y = expected.getLong(i)
                if (x == y) continue
                error = abs(x.toDouble() - y.toDouble()).coerceAtLeast(1.0)
                allowed = 0.0
            } else {
                val x = actual.getDouble(i)
                val y = expected.getDouble(i)
                when {
                    x == y -> continue // also equal infinities
                    x.isNaN() && y.isNaN() -> if (equalNan) continue else { error = Double.POSITIVE_INFINITY; allowed = 0.0 }
                    x.isNaN() || y.isNaN() || x.isInfinite() || y.isInfinite() -> { error = Double.POSITIVE_INFINITY; allowed = atol + rtol * abs(y) }
                    else -> {
                        error = abs(x - y)
                        allowed = atol + rtol * abs(y)
                        if (error <= allowed) continue
                    }
                }
            }
            wrong++
            if (error > worstError) {
                worst = i; worstError = error; worstAllowed = allowed
            }
        }
        val where = if (worst < 0) "" else
            "worst at ${index(worst, actual.shape)} (flat index $worst): actual ${show(actual, worst)}, expected ${show(expected, worst)}, " +
                "error ${if (worstError.isInfinite()) "infinite (NaN or infinity)" else worstError.toString()} > allowed $worstAllowed"
        return MatcherResult(
            wrong == 0L,
            { "${actual.dtype}${actual.shape} is not close to the expected tensor ($tol): $wrong of ${actual.numel} elements differ; $where" },
            { "${actual.dtype}${actual.shape} should not have been close to the expected tensor ($tol), but every element is" },
        )
    }
}
