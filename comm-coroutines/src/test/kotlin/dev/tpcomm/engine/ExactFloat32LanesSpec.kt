package dev.tpcomm.engine

import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.ints.shouldBeGreaterThan
import io.kotest.matchers.shouldBe
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.math.BigDecimal
import kotlin.random.Random

/**
 * The vector kernel's certificate, at its edge: every group it writes holds, per element, the
 * correctly rounded sum (or average) of the rows' floats, checked against `BigDecimal`; the groups
 * it hands back are the ones it cannot certify. The draws put each element's exponent range on
 * both sides of the window `29 - ceil(log2 n)` (powers of two and all-ones mantissas at its ends,
 * where the bound is tight), beside zeros of both signs, subnormals, NaN and infinities. Both
 * branches must run, so a kernel that certified nothing, or everything, fails.
 */
class ExactFloat32LanesSpec : FunSpec({
    val lanes = ExactFloat32Lanes.lanes
    val f32 = ValueLayout.JAVA_FLOAT_UNALIGNED

    fun reference(values: List<Float>, average: Boolean): Float {
        var exact = values.fold(BigDecimal.ZERO) { s, x -> s.add(BigDecimal(x.toDouble())) }
        if (average) exact = exact.divide(BigDecimal(values.size)) // a power of two: exact
        return if (exact.signum() == 0) (if (values.all { it.toRawBits() == (-0.0f).toRawBits() }) -0.0f else 0.0f) else exact.toFloat()
    }

    /** A float of magnitude in binade [exponent] (a field value, 1..254): its mantissa all zeros, all ones or random. */
    fun inBinade(r: Random, exponent: Int): Float {
        val mantissa = when (r.nextInt(3)) { 0 -> 0; 1 -> 0x7FFFFF; else -> r.nextInt(0x800000) }
        val sign = if (r.nextBoolean()) Int.MIN_VALUE else 0
        return java.lang.Float.intBitsToFloat(sign or (exponent shl 23) or mantissa)
    }

    /** One element's [n] values of [kind]; kinds 0-5 span [spread] binades. */
    fun element(r: Random, n: Int, kind: Int, spread: Int): List<Float> {
        val window = 29 - (32 - Integer.numberOfLeadingZeros(n - 1))
        return when (kind) {
            in 0..5 -> { // a range of `spread` binades from a random top
                val top = r.nextInt(1 + spread, 254)
                List(n) { j -> if (j == 0) inBinade(r, top) else if (j == 1) inBinade(r, top - spread) else inBinade(r, r.nextInt(top - spread, top + 1)) }.shuffled(r)
            }
            6 -> List(n) { if (r.nextBoolean()) 0.0f else -0.0f } // zeros of both signs
            7 -> List(n) { j -> if (j % 2 == 0) java.lang.Float.intBitsToFloat(r.nextInt(1, 0x800000)) else inBinade(r, r.nextInt(1, 1 + window)) }.shuffled(r) // subnormals
            8 -> List(n) { j -> if (j == 0) listOf(Float.NaN, Float.POSITIVE_INFINITY, Float.NEGATIVE_INFINITY)[r.nextInt(3)] else inBinade(r, 127) }.shuffled(r)
            else -> List(n) { inBinade(r, r.nextInt(100, 110)) } // a narrow range
        }
    }

    test("every group the kernel writes is the correctly rounded sum or average; the rest it hands back; 1-8 rows at the window's edge") {
        Arena.ofConfined().use { arena ->
            val groups = ExactFloat32Lanes.BLOCK / lanes
            var certified = 0
            var handedBack = 0
            for (seed in 0 until 40) for (average in listOf(false, true)) {
                val r = Random(seed)
                val n = if (average) listOf(1, 2, 4, 8)[seed % 4] else 1 + seed % 8
                val len = ExactFloat32Lanes.BLOCK
                // A group shares a kind and a spread (window - 2 .. window + 2 binades), so it is certified or handed back as one.
                val window = 29 - (32 - Integer.numberOfLeadingZeros(n - 1))
                val values = List(groups) {
                    val kind = r.nextInt(10)
                    val spread = window - 2 + r.nextInt(5)
                    List(lanes) { element(r, n, kind, spread) }
                }.flatten()
                val rows = Array<MemorySegment?>(n) { j -> arena.allocate(len * 4L).also { s -> for (k in 0 until len) s.setAtIndex(f32, k.toLong(), values[k][j]) } }
                val out = arena.allocate(len * 4L)
                out.fill(0x55)
                val failed = LongArray(ExactFloat32Lanes.BLOCK)
                val fails = ExactFloat32Lanes.block(average, n, rows, 0, arrayOf(out), 1, 0, 0, len, DoubleArray(len), IntArray(len), IntArray(len), failed)
                val back = failed.take(fails).toSet()
                for (g in 0 until groups) {
                    val first = g.toLong() * lanes
                    if (first in back) {
                        handedBack++
                        for (k in first until first + lanes) withClue("group $g handed back: nothing written") { out.getAtIndex(ValueLayout.JAVA_INT_UNALIGNED, k) shouldBe 0x55555555 }
                        continue
                    }
                    certified++
                    for (k in first until first + lanes) {
                        val v = values[k.toInt()]
                        withClue("seed $seed n $n average $average element $k of $v") {
                            v.any { !it.isFinite() } shouldBe false // NaN and infinities are never certified
                            out.getAtIndex(f32, k).toRawBits() shouldBe reference(v, average).toRawBits()
                        }
                    }
                }
            }
            certified shouldBeGreaterThan 100
            handedBack shouldBeGreaterThan 100
        }
    }
})
