package dev.tpcomm.coroutines.local

import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

/**
 * NaN under Max/Min propagates (IEEE 754-2019 maximum/minimum, as torch.maximum): any NaN among
 * the ranks' values gives NaN, whichever rank holds it and whatever its bits (quiet, signalling with
 * a payload only in the low bits, negative). Signed zeros order as IEEE says: max(-0, +0) = +0,
 * min(-0, +0) = -0. Checked through allReduce (the Vector API kernels when the module is present)
 * and through the scalar kernels directly, on 2, 3 and 4 ranks (4 takes the unrolled path).
 */
class NanMaxMinSpec : FunSpec({
    val n = 1500 // crosses the 1024-element block and leaves a vector tail

    /** NaN bit patterns per dtype: quiet, signalling with a low payload, negative quiet. */
    fun nans(dtype: DType): List<Long> = when (dtype) {
        DType.Float16 -> listOf(0x7E00L, 0x7C01L, 0xFE00L)
        DType.BFloat16 -> listOf(0x7FC0L, 0x7F81L, 0xFFC0L)
        DType.Float32 -> listOf(0x7FC00000L, 0x7F800001L, 0xFFC00000L)
        else -> listOf(0x7FF8000000000000L, 0x7FF0000000000001L, -0x8000000000000L) // last: 0xFFF8...
    }

    fun write(seg: MemorySegment, dtype: DType, i: Int, bits: Long) = when (dtype) {
        DType.Float16, DType.BFloat16 -> seg.setAtIndex(ValueLayout.JAVA_SHORT_UNALIGNED, i.toLong(), bits.toShort())
        DType.Float32 -> seg.setAtIndex(ValueLayout.JAVA_INT_UNALIGNED, i.toLong(), bits.toInt())
        else -> seg.setAtIndex(ValueLayout.JAVA_LONG_UNALIGNED, i.toLong(), bits)
    }

    fun numberBits(dtype: DType, v: Float): Long = when (dtype) {
        DType.Float16 -> java.lang.Float.floatToFloat16(v).toLong() and 0xFFFF
        DType.BFloat16 -> (java.lang.Float.floatToRawIntBits(v) ushr 16).toLong()
        DType.Float32 -> java.lang.Float.floatToRawIntBits(v).toLong() and 0xFFFFFFFFL
        else -> java.lang.Double.doubleToRawLongBits(v.toDouble())
    }

    /** Rank [r]'s raw bits at index [i]: the kind of index (i % 6) says who holds a NaN, or signed zeros. */
    fun input(dtype: DType, w: Int, r: Int, i: Int): Long {
        val nan = nans(dtype)[i % 3]
        return when (i % 6) {
            0 -> numberBits(dtype, (r * 7 + i % 11 - 5).toFloat()) // numbers only
            1 -> if (r == 0) nan else numberBits(dtype, r.toFloat())
            2 -> if (r == w - 1) nan else numberBits(dtype, -r.toFloat())
            3 -> if (r == w / 2) nan else numberBits(dtype, 1e3f)
            4 -> nan // every rank
            else -> numberBits(dtype, if (r % 2 == 0) -0.0f else 0.0f) // signed zeros (w >= 2: both present)
        }
    }

    fun expected(dtype: DType, op: ReduceOp, w: Int, i: Int): Double? = when (i % 6) {
        1, 2, 3, 4 -> null // NaN
        5 -> if (op == ReduceOp.Max) 0.0 else -0.0
        else -> (0 until w).map { (it * 7 + i % 11 - 5).toDouble() }.let { if (op == ReduceOp.Max) it.max() else it.min() }
    }

    fun checkResult(t: Tensor, dtype: DType, op: ReduceOp, w: Int, where: String) {
        for (i in 0 until n) {
            val got = t.getDouble(i.toLong())
            val want = expected(dtype, op, w, i)
            if (want == null) {
                withClue("$where index $i: expected NaN, got $got") { got.isNaN() shouldBe true }
            } else {
                withClue("$where index $i") {
                    java.lang.Double.doubleToRawLongBits(got) shouldBe java.lang.Double.doubleToRawLongBits(want)
                }
            }
        }
    }

    for (dtype in listOf(DType.Float16, DType.BFloat16, DType.Float32, DType.Float64)) {
        for (op in listOf(ReduceOp.Max, ReduceOp.Min)) {
            test("$op on $dtype propagates NaN from any rank: allReduce (vector kernels when present) and the scalar kernels") {
                for (w in 2..4) {
                    val results = runLocalWorld(w) { comm ->
                        val t = Tensor.zeros(dtype, n)
                        for (i in 0 until n) write(t.segment, dtype, i, input(dtype, w, comm.rank, i))
                        comm.allReduce(t, op)
                    }
                    for ((r, t) in results.withIndex()) checkResult(t, dtype, op, w, "allReduce w=$w rank $r")

                    val ins = List(w) { r -> Tensor.zeros(dtype, n).also { t -> for (i in 0 until n) write(t.segment, dtype, i, input(dtype, w, r, i)) } }
                    val out = Tensor.zeros(dtype, n)
                    ReduceKernels.reduceScalar(dtype, op, w, Array(w) { ins[it].segment }, 0, arrayOf(out.segment), 1, 0, n.toLong())
                    checkResult(out, dtype, op, w, "scalar w=$w")
                }
            }
        }
    }
})

private inline fun <T> withClue(clue: String, block: () -> T): T = io.kotest.assertions.withClue(clue, block)
