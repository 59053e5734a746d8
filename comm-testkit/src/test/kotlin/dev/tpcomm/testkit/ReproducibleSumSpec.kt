package dev.tpcomm.testkit

import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.engine.ExactSum
import dev.tpcomm.coroutines.Reproducible
import dev.tpcomm.coroutines.reproducible
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.shouldNotBe
import kotlinx.coroutines.withContext
import kotlin.random.Random

/**
 * The reproducible reductions' kernel against the independent exact reference, and the local world
 * against itself across world sizes and rank orders, where the default reductions differ.
 */
class ReproducibleSumSpec : FunSpec({
    val floats = DType.entries.filter { it.isFloatingPoint }

    test("ExactSum equals the BigDecimal reference bit for bit: 1-8 values, every float dtype, adversarial draws") {
        val random = Random(36)
        for (dtype in floats) repeat(4000) {
            val n = random.nextInt(1, 9)
            val pool = ReproducibleCases.Inputs.pool(random, dtype, n, 1)
            val values = DoubleArray(n) { ExactReference.valueOf(dtype, pool[it][0]) }
            for (average in listOf(false, true)) {
                val t = ReproducibleCases.Inputs.tensor(dtype, LongArray(n) { pool[it][0] })
                val out = Tensor.zeros(dtype, 1)
                ExactSum.reduceRows(dtype, average, n, t.segment, 1, 0, 1, out.segment, 0)
                val got = ReproducibleCases.Inputs.bits(out)[0]
                val expected = ExactReference.reduce(dtype, values.toList(), if (average) n else 1)
                withClue(dtype, average, values, got, expected) { got shouldBe expected }
            }
        }
    }

    test("edge cases: overflow to infinity, NaN from both infinities, signed zeros, subnormals, ties decided by the remainder") {
        fun sum(dtype: DType, vararg v: Double) = ExactSum.sum(dtype, v)
        sum(DType.Float32, Float.MAX_VALUE.toDouble(), Float.MAX_VALUE.toDouble()) shouldBe Double.POSITIVE_INFINITY
        sum(DType.Float32, Float.MAX_VALUE.toDouble(), Float.MAX_VALUE.toDouble(), -Float.MAX_VALUE.toDouble()) shouldBe Float.MAX_VALUE.toDouble()
        sum(DType.Float64, Double.MAX_VALUE, Double.MAX_VALUE, -Double.MAX_VALUE) shouldBe Double.MAX_VALUE
        sum(DType.Float64, Double.MAX_VALUE, Double.MAX_VALUE).isInfinite() shouldBe true
        sum(DType.Float16, 65504.0, 16.0) shouldBe Double.POSITIVE_INFINITY // 65520 is the tie past the largest: rounds to even, infinity
        sum(DType.Float16, 65504.0, 15.0) shouldBe 65504.0
        sum(DType.Float32, Double.POSITIVE_INFINITY, Double.NEGATIVE_INFINITY).isNaN() shouldBe true
        sum(DType.Float32, Double.NaN, Double.POSITIVE_INFINITY).isNaN() shouldBe true
        sum(DType.Float32, -0.0, -0.0).toRawBits() shouldBe (-0.0).toRawBits()
        sum(DType.Float32, -0.0, 0.0).toRawBits() shouldBe 0L
        sum(DType.Float32, 1.0, -1.0, -0.0).toRawBits() shouldBe 0L
        sum(DType.Float32, Float.MIN_VALUE.toDouble(), Float.MIN_VALUE.toDouble()) shouldBe 2.0 * Float.MIN_VALUE
        // 1 + 2^-24 is a float32 tie: the remainder 2^-60 decides upward (a double sum would round to 1 first).
        sum(DType.Float32, 1.0, Math.scalb(1.0, -24), Math.scalb(1.0, -60)) shouldBe 1.0 + Math.scalb(1.0, -23)
        sum(DType.Float32, 1.0, Math.scalb(1.0, -24), -Math.scalb(1.0, -60)) shouldBe 1.0
        // Catastrophic cancellation: the big terms vanish exactly.
        sum(DType.Float64, 1e308, 1.0, -1e308, 1e-300) shouldBe 1.0
        ExactSum.average(DType.Float64, doubleArrayOf(1.0, 1.0, 2.0)) shouldBe 4.0 / 3.0
        ExactSum.average(DType.Float64, doubleArrayOf(Double.MAX_VALUE, Double.MAX_VALUE)) shouldBe Double.MAX_VALUE
    }

    /** Rank r holds pool[perm[r]]; ranks past the pool hold +0. The result's bits on rank 0. */
    suspend fun allReduceBits(world: Int, perm: List<Int>, pool: List<LongArray>, dtype: DType, reproducible: Boolean): LongArray =
        runLocalWorld(world, CommConfig(worldSize = world)) { comm ->
            val mine = if (comm.rank < perm.size) pool[perm[comm.rank]] else LongArray(pool[0].size)
            val t = ReproducibleCases.Inputs.tensor(dtype, mine)
            withContext(if (reproducible) Reproducible.On else Reproducible.Off) { comm.allReduce(t) }
            ReproducibleCases.Inputs.bits(t)
        }[0]

    test("the default reductions differ across world sizes and rank orders on cancelling inputs; the reproducible ones do not") {
        val dtype = DType.Float32
        val random = Random(7)
        // Per element: a huge value, its negation and small ones, in 4 contributions.
        val len = 64
        val pool = List(4) { LongArray(len) }
        for (i in 0 until len) {
            val big = random.nextDouble(1e7, 1e8).toFloat()
            val small = listOf(random.nextDouble(0.0, 1.0).toFloat(), random.nextDouble(0.0, 1.0).toFloat())
            val vals = listOf(big, small[0], -big, small[1])
            for (j in 0 until 4) pool[j][i] = java.lang.Float.floatToRawIntBits(vals[j]).toLong() and 0xFFFFFFFFL
        }
        val layouts = listOf(4 to listOf(0, 1, 2, 3), 4 to listOf(0, 2, 1, 3), 4 to listOf(1, 3, 0, 2), 8 to listOf(3, 2, 1, 0), 5 to listOf(2, 0, 3, 1))
        val default = layouts.map { (w, p) -> allReduceBits(w, p, pool, dtype, false).toList() }.toSet()
        val exact = layouts.map { (w, p) -> allReduceBits(w, p, pool, dtype, true).toList() }.toSet()
        default.size shouldNotBe 1 // the problem the issue describes
        exact.size shouldBe 1
        exact.single().toLongArray() shouldBe ReproducibleCases.Inputs.expected(dtype, pool, (0 until 4).toList(), ReduceOp.Sum)
    }

    test("CommConfig.reproducibleReductions makes it the communicator's default; Reproducible.Off and reproducible(false) opt out per call") {
        runLocalWorld(3, CommConfig(worldSize = 3, reproducibleReductions = true)) { comm ->
            val x = floatArrayOf(1e8f, 1f, -1e8f)
            val mine = Tensor.of(floatArrayOf(x[comm.rank]))
            comm.allReduce(mine)
            mine.toFloatArray()[0] shouldBe 1f
            val off = Tensor.of(floatArrayOf(x[comm.rank]))
            comm.reproducible(false).allReduce(off)
            val defaultBits = off.toFloatArray()[0]
            // The default kernel's answer is its own (rank order); the view over reproducible(false) must not be the exact path's
            // composite: its flight record is one allReduce, not a composite with steps.
            (defaultBits == 1f || defaultBits == 0f) shouldBe true
        }
    }
})

private fun withClue(dtype: DType, average: Boolean, values: DoubleArray, got: Long, expected: Long, block: () -> Unit) =
    io.kotest.assertions.withClue("$dtype ${if (average) "avg" else "sum"} of ${values.toList()}: got 0x${got.toString(16)}, expected 0x${expected.toString(16)}", block)
