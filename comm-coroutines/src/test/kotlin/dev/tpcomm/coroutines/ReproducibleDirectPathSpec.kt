package dev.tpcomm.coroutines

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.Float8
import dev.tpcomm.HalfPrecision
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.engine.ExactSum
import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import java.lang.foreign.ValueLayout
import kotlin.random.Random

/**
 * The in-process backend reduces reproducible `Sum` and `Avg` in one collective of its own
 * (every rank's input read once); every other backend composes them from all-gather or
 * all-to-all plus all-gather. Both must give the same bits, and those of [ExactSum] per element,
 * on adversarial inputs: cancellation, huge dynamic range, NaN and infinities, subnormals, signed
 * zeros, at the small (one all-gather) and chunked sizes, the parallel size, every float dtype.
 * The composed path runs over the same world through a communicator that is not tpcomm's (a
 * delegating wrapper), which composes the reductions from its collectives.
 */
class ReproducibleDirectPathSpec : FunSpec({
    timeout = 300_000

    val dtypes = listOf(DType.Float32, DType.Float64, DType.Float16, DType.BFloat16, DType.Float8E4M3, DType.Float8E5M2)

    /** A value of one of six kinds (the kind shared by every rank for element [k]; the value each rank's own). */
    fun value(kind: Int, r: Random, rank: Int, dtype: DType): Double = when (kind) {
        0 -> (r.nextDouble() * 2 - 1) * Math.scalb(1.0, r.nextInt(-12, 12)) // one scale: sums exact in double
        1 -> (if (rank % 2 == 0) 1.0 else -1.0) * Math.scalb(1.0 + r.nextInt(4) * 0.25, 20) + r.nextDouble() * 1e-3 // cancellation
        2 -> (if (r.nextBoolean()) 1.0 else -1.0) * Math.scalb(r.nextDouble() + 0.5, r.nextInt(-160, if (dtype == DType.Float64) 1024 else 128)) // huge range
        3 -> (if (r.nextBoolean()) 1.0 else -1.0) * r.nextInt(1, 8) * when (dtype) { // subnormals
            DType.Float64 -> java.lang.Double.MIN_VALUE
            DType.Float16 -> Math.scalb(1.0, -24)
            DType.Float8E4M3 -> Math.scalb(1.0, -9)
            DType.Float8E5M2 -> Math.scalb(1.0, -16)
            else -> java.lang.Float.MIN_VALUE.toDouble()
        }
        4 -> if (r.nextBoolean()) 0.0 else -0.0
        5 -> listOf(Double.NaN, Double.POSITIVE_INFINITY, Double.NEGATIVE_INFINITY, 1.0, if (dtype == DType.Float64) Double.MAX_VALUE else 6e4)[r.nextInt(5)]
        else -> error("kind $kind")
    }

    fun fill(t: Tensor, seed: Int, rank: Int) {
        val kinds = Random(seed)
        val r = Random(seed * 31 + rank + 1)
        val s = t.segment
        for (k in 0 until t.numel) {
            val kind = kinds.nextInt(12).let { if (it >= 6) 0 else it } // half of the elements one scale
            val v = value(kind, r, rank, t.dtype)
            when (t.dtype) {
                DType.Float32 -> s.set(ValueLayout.JAVA_FLOAT_UNALIGNED, k * 4, v.toFloat())
                DType.Float64 -> s.set(ValueLayout.JAVA_DOUBLE_UNALIGNED, k * 8, v)
                DType.Float16 -> s.set(ValueLayout.JAVA_SHORT_UNALIGNED, k * 2, HalfPrecision.floatToFloat16(v.toFloat()))
                DType.BFloat16 -> s.set(ValueLayout.JAVA_SHORT_UNALIGNED, k * 2, HalfPrecision.floatToBFloat16(v.toFloat()))
                DType.Float8E4M3 -> s.set(ValueLayout.JAVA_BYTE, k, if (v.isNaN()) 0x7F else Float8.toE4M3(v))
                DType.Float8E5M2 -> s.set(ValueLayout.JAVA_BYTE, k, if (v.isNaN()) 0x7E else Float8.toE5M2(v))
                else -> error("${t.dtype}")
            }
        }
    }

    fun bits(t: Tensor): ByteArray = t.segment.toArray(ValueLayout.JAVA_BYTE)

    /** A communicator that is not tpcomm's: `reproducible()` composes the reductions from its collectives. */
    fun composed(comm: Communicator): Communicator = object : Communicator by comm {}

    for (world in listOf(2, 3, 4)) for (dtype in dtypes) {
        test("reproducible allReduce Sum and Avg and reduce: the direct path's bits are the composed path's, $dtype, world $world") {
            val lengths = listOf(1, 7, 16 * 1024 / dtype.byteSize + 13) + if (dtype == DType.Float32 && world == 4) listOf(70_001) else emptyList()
            runLocalWorld(world) { comm ->
                for (op in listOf(ReduceOp.Sum, ReduceOp.Avg)) for ((i, len) in lengths.withIndex()) {
                    val seed = world * 1000 + dtype.ordinal * 10 + i
                    val a = Tensor.zeros(dtype, len).also { fill(it, seed, comm.rank) }
                    val b = Tensor.zeros(dtype, len).also { fill(it, seed, comm.rank) }
                    val inputs = (0 until world).map { r -> Tensor.zeros(dtype, len).also { fill(it, seed, r) } }
                    comm.reproducible().allReduce(a, op)
                    composed(comm).reproducible().allReduce(b, op)
                    val what = "allReduce $op $dtype x$len world $world rank ${comm.rank}"
                    withClue(what) { bits(a).contentEquals(bits(b)) shouldBe true }
                    // Each element ExactSum's, from every rank's input.
                    val expect = Tensor.zeros(dtype, len)
                    val rows = Tensor.concat(inputs, 0)
                    ExactSum.reduceRows(dtype, op == ReduceOp.Avg, world, rows.segment, len.toLong(), 0, len.toLong(), expect.segment, 0)
                    withClue("$what against ExactSum") { bits(a).contentEquals(bits(expect)) shouldBe true }
                    if (dtype == DType.Float32) {
                        // Independently of the kernel: each element whose values are finite, the exact BigDecimal sum (or sum / n) rounded once.
                        for (k in 0 until len) {
                            val v = inputs.map { it.segment.getAtIndex(ValueLayout.JAVA_FLOAT_UNALIGNED, k.toLong()) }
                            if (v.any { !it.isFinite() }) continue
                            var exact = v.fold(java.math.BigDecimal.ZERO) { s, x -> s.add(java.math.BigDecimal(x.toDouble())) }
                            if (op == ReduceOp.Avg) exact = exact.divide(java.math.BigDecimal(world), java.math.MathContext(200))
                            val want = if (exact.signum() == 0) (if (v.all { it.toRawBits() == (-0.0f).toRawBits() }) -0.0f else 0.0f) else exact.toFloat()
                            val got = a.segment.getAtIndex(ValueLayout.JAVA_FLOAT_UNALIGNED, k.toLong())
                            withClue("$what element $k of $v against BigDecimal") { got.toRawBits() shouldBe want.toRawBits() }
                        }
                    }
                    // reduce to the last rank: the root's bits the same; the others' tensors as they were.
                    val root = world - 1
                    val c = Tensor.zeros(dtype, len).also { fill(it, seed, comm.rank) }
                    val d = Tensor.zeros(dtype, len).also { fill(it, seed, comm.rank) }
                    comm.reproducible().reduce(c, root, op)
                    composed(comm).reproducible().reduce(d, root, op)
                    withClue("reduce $op $dtype x$len world $world rank ${comm.rank}") { bits(c).contentEquals(bits(d)) shouldBe true }
                    if (comm.rank == root) withClue("reduce root against ExactSum") { bits(c).contentEquals(bits(expect)) shouldBe true }
                    (inputs + listOf(a, b, c, d, expect, rows)).forEach { it.close() }
                }
            }
        }
    }
})
