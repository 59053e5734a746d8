package dev.tpcomm.examples

import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.doubles.shouldBeLessThan
import io.kotest.matchers.shouldBe
import kotlin.math.abs

class MatMulTest : FunSpec({
    fun naive(a: FloatArray, b: FloatArray, m: Int, k: Int, n: Int) = FloatArray(m * n).also { c ->
        for (i in 0 until m) for (j in 0 until n) {
            var s = 0.0
            for (x in 0 until k) s += a[i * k + x].toDouble() * b[x * n + j]
            c[i * n + j] = s.toFloat()
        }
    }
    fun maxDiff(a: FloatArray, b: FloatArray) = a.indices.maxOf { abs(a[it] - b[it]).toDouble() }

    test("mm, mmTransA and mmTransB agree with a naive product, also across block edges") {
        for ((m, k, n) in listOf(Triple(3, 5, 7), Triple(17, 130, 600), Triple(1, 1, 1))) {
            val a = SyntheticData.uniform(1, m * k, 1f)
            val b = SyntheticData.uniform(2, k * n, 1f)
            val c = FloatArray(m * n)
            MatMul.mm(a, b, c, m, k, n)
            maxDiff(c, naive(a, b, m, k, n)) shouldBeLessThan 1e-4
            // a^T (k x m) * a2 (m x n)
            val a2 = SyntheticData.uniform(3, m * n, 1f)
            val ct = FloatArray(k * n)
            MatMul.mmTransA(a, a2, ct, m, k, n)
            val at = FloatArray(k * m).also { MatMul.transpose(a, it, m, k) }
            maxDiff(ct, naive(at, a2, k, m, n)) shouldBeLessThan 1e-4
            // c (m x n) * b^T where b is (k x n): result m x k
            val cb = FloatArray(m * k)
            MatMul.mmTransB(c, b, cb, m, n, k)
            val bt = FloatArray(n * k).also { MatMul.transpose(b, it, k, n) }
            maxDiff(cb, naive(c, bt, m, n, k)) shouldBeLessThan 1e-2
        }
    }

    test("a block of rows computed alone equals the same rows of the whole product, bit for bit") {
        val a = SyntheticData.uniform(4, 8 * 16, 1f)
        val b = SyntheticData.uniform(5, 16 * 8, 1f)
        val whole = FloatArray(64)
        MatMul.mm(a, b, whole, 8, 16, 8)
        val parts = FloatArray(64)
        MatMul.mm(a, b, parts, 4, 16, 8, aRow = 0, cRow = 0)
        MatMul.mm(a, b, parts, 4, 16, 8, aRow = 4, cRow = 4)
        parts.toList() shouldBe whole.toList()
    }

    test("column slices round-trip") {
        val x = FloatArray(12) { it.toFloat() }   // 3 x 4
        val cols = MatMul.columns(x, 3, 4, 1, 2)
        cols.toList() shouldBe listOf(1f, 2f, 5f, 6f, 9f, 10f)
        val y = FloatArray(12)
        MatMul.putColumns(y, 3, 4, 1, cols, 2)
        y.toList() shouldBe listOf(0f, 1f, 2f, 0f, 0f, 5f, 6f, 0f, 0f, 9f, 10f, 0f)
    }

    test("GeLU's derivative matches a finite difference") {
        for (x in listOf(-3f, -1f, -0.1f, 0f, 0.5f, 2f)) {
            val h = 1e-3
            val fd = (Gelu.value((x + h).toFloat()).toDouble() - Gelu.value((x - h).toFloat())) / (2 * h)
            abs(fd - Gelu.derivative(x)) shouldBeLessThan 2e-3
        }
        Gelu.value(0f) shouldBe 0f
    }
})
