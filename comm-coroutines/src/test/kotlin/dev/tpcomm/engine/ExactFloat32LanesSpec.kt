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
 * The vector kernel's certificates, at their edges: every group it writes holds, per element, the
 * correctly rounded sum (or average) of the rows' floats, checked against `BigDecimal`; the groups
 * it hands back write nothing. The draws are the cases a looser certificate gets wrong: a sum that
 * lands on a rounding midpoint with a term too small for the double sum (a larger distance certifies
 * the tie's side), or with two terms that cancel below the double sum's last bit (a wider exact span
 * certifies the tie), a cancellation of huge terms that swallowed a small one (dropping the
 * error bound certifies the double sum's 0), sums at the overflow threshold (an uncapped threshold
 * certifies infinity), beside ordinary values (which must almost all be certified), zeros of both
 * signs, subnormals, NaN and infinities. Both branches must run, so a kernel that certified
 * nothing, or everything, fails.
 */
class ExactFloat32LanesSpec : FunSpec({
    val lanes = ExactFloat32Lanes.lanes
    val f32 = ValueLayout.JAVA_FLOAT_UNALIGNED

    fun reference(values: List<Float>, average: Boolean): Float {
        var exact = values.fold(BigDecimal.ZERO) { s, x -> s.add(BigDecimal(x.toDouble())) }
        if (average) exact = exact.divide(BigDecimal(values.size)) // a power of two: exact
        return if (exact.signum() == 0) (if (values.all { it.toRawBits() == (-0.0f).toRawBits() }) -0.0f else 0.0f) else exact.toFloat()
    }

    fun bits(sign: Boolean, exponent: Int, mantissa: Int): Float =
        java.lang.Float.intBitsToFloat((if (sign) Int.MIN_VALUE else 0) or (exponent shl 23) or mantissa)

    /** One element's [n] values of [kind], in a random order (the kernel adds in row order). */
    fun element(r: Random, n: Int, kind: Int): List<Float> = when (kind) {
        0 -> { // a midpoint of two floats plus or minus a term 1-60 binades below it: the double sum is exact down to about 6
            val e = r.nextInt(90, 200)
            val x = bits(false, e, r.nextInt(0x800000))
            val halfUlp = bits(false, e - 24, 0)
            val tiny = bits(r.nextBoolean(), e - 24 - r.nextInt(1, 60), r.nextInt(0x800000))
            (listOf(x, halfUlp, tiny) + List(maxOf(0, n - 3)) { 0.0f }).take(n)
        }
        1 -> { // huge terms that cancel, and a small one the double sum may lose
            val big = bits(r.nextBoolean(), r.nextInt(180, 250), r.nextInt(0x800000))
            val small = bits(r.nextBoolean(), r.nextInt(100, 127), r.nextInt(0x800000))
            (listOf(big, -big, small) + List(maxOf(0, n - 3)) { if (r.nextBoolean()) big else -big }).take(n)
        }
        2 -> { // at float's overflow threshold (MAX + half an ulp), nudged below or above
            val max = Float.MAX_VALUE
            val half = bits(false, 254 - 24, 0)
            val nudge = bits(r.nextBoolean(), 254 - 24 - 40, r.nextInt(0x800000))
            (listOf(max, half, nudge) + List(maxOf(0, n - 3)) { 0.0f }).take(n)
        }
        3 -> List(n) { if (r.nextBoolean()) 0.0f else -0.0f } // zeros of both signs
        4 -> List(n) { j -> if (j % 2 == 0) java.lang.Float.intBitsToFloat(r.nextInt(1, 0x800000)) else bits(r.nextBoolean(), r.nextInt(1, 4), r.nextInt(0x800000)) } // subnormals
        5 -> List(n) { j -> if (j == 0) listOf(Float.NaN, Float.POSITIVE_INFINITY, Float.NEGATIVE_INFINITY)[r.nextInt(3)] else bits(false, 127, 0) }
        6 -> List(n) { j -> val x = bits(r.nextBoolean(), r.nextInt(90, 160), r.nextInt(0x800000)); if (j == 1) -x else x } // exact cancellation of a pair
        7 -> { // a midpoint plus two terms 30 binades below it that cancel to 2^-53 of it: the double sum rounds them to the tie
            val e = r.nextInt(90, 200)
            val sign = r.nextBoolean()
            val pair = listOf(bits(sign, e - 30, 1), bits(!sign, e - 30, 0))
            (listOf(bits(false, e, r.nextInt(0x800000)), bits(false, e - 24, 0)) + pair + List(maxOf(0, n - 4)) { 0.0f }).take(n)
        }
        else -> List(n) { (r.nextDouble(-1.0, 1.0) * Math.scalb(1.0, r.nextInt(-20, 20))).toFloat() } // ordinary values
    }.shuffled(r)

    test("every group the kernel writes is the correctly rounded sum or average; the groups it hands back are written nothing") {
        Arena.ofConfined().use { arena ->
            val groups = 64
            val len = groups * lanes
            var certified = 0
            var handedBack = 0
            var ordinary = 0
            var ordinaryBack = 0
            for (seed in 0 until 60) for (average in listOf(false, true)) {
                val r = Random(seed)
                val n = if (average) listOf(1, 2, 4, 8)[seed % 4] else 1 + seed % 8
                val kinds = List(groups) { r.nextInt(10) } // a group shares a kind
                val values = kinds.flatMap { kind -> List(lanes) { element(r, n, kind) } }
                val rows = Array<MemorySegment?>(n) { j -> arena.allocate(len * 4L).also { s -> for (k in 0 until len) s.setAtIndex(f32, k.toLong(), values[k][j]) } }
                val out = arena.allocate(len * 4L)
                out.fill(0x55)
                val back = HashSet<Long>()
                var k = 0L
                while (true) {
                    k = ExactFloat32Lanes.run(average, n, rows, 0, arrayOf(out), 1, 0, k, len.toLong())
                    if (k + lanes > len) break
                    back += k
                    k += lanes
                }
                k shouldBe len.toLong()
                for (g in 0 until groups) {
                    val first = g.toLong() * lanes
                    val isOrdinary = kinds[g] >= 8
                    if (isOrdinary) ordinary++
                    if (first in back) {
                        handedBack++
                        if (isOrdinary) ordinaryBack++
                        for (e in first until first + lanes) withClue("group $g handed back: nothing written") { out.getAtIndex(ValueLayout.JAVA_INT_UNALIGNED, e) shouldBe 0x55555555 }
                        continue
                    }
                    certified++
                    for (e in first until first + lanes) {
                        val v = values[e.toInt()]
                        withClue("seed $seed n $n average $average kind ${kinds[g]} element $e of $v") {
                            v.any { !it.isFinite() } shouldBe false // NaN and infinities are never certified
                            out.getAtIndex(f32, e).toRawBits() shouldBe reference(v, average).toRawBits()
                        }
                    }
                }
            }
            certified shouldBeGreaterThan 1000
            handedBack shouldBeGreaterThan 1000
            withClue("ordinary groups handed back: $ordinaryBack of $ordinary") { (ordinaryBack * 100 < ordinary) shouldBe true }
        }
    }
})
