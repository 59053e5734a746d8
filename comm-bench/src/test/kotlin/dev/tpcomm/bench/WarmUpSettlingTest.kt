package dev.tpcomm.bench

import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.doubles.plusOrMinus
import io.kotest.matchers.doubles.shouldBeGreaterThan
import io.kotest.matchers.doubles.shouldBeLessThan
import io.kotest.matchers.shouldBe
import kotlin.random.Random

class WarmUpSettlingTest : FunSpec({
    /**
     * Feeds [settling] chunks as BenchRunner does (doubling while a chunk is shorter than 10 ms) of
     * calls costing [perCall] seconds at elapsed time t; returns the elapsed time at which it stopped.
     */
    fun run(settling: WarmUpSettling, perCall: (Double) -> Double): Double {
        var elapsed = 0.0
        var chunk = 8L
        while (true) {
            elapsed += chunk * perCall(elapsed)
            if (settling.settled(chunk, elapsed)) return elapsed
            if (settling.lastChunkSeconds < WarmUpSettling.CHUNK_SECONDS) chunk *= 2
        }
    }

    test("a JIT-like curve: not stopped on a plateau shorter than the settling time, stopped once the fast phase held for it") {
        // Interpreted and C1 code at 10 µs per call for 0.4 s, a plateau at 5 µs for 0.3 s (C2 compiling), then 1 µs.
        val curve = { t: Double -> if (t < 0.4) 10e-6 else if (t < 0.7) 5e-6 else 1e-6 }
        val s = WarmUpSettling(capSeconds = 10.0)
        val stoppedAt = run(s, curve)
        s.bestPerCall shouldBe (1e-6 plusOrMinus 1e-12)
        stoppedAt shouldBeGreaterThan 0.7 + WarmUpSettling.SETTLE_SECONDS
        stoppedAt shouldBeLessThan 0.7 + WarmUpSettling.SETTLE_SECONDS + 0.05
        // The fixed count it replaces (20,000 calls) ended inside the first phase: 0.2 s at 10 µs.
        (20_000 * 10e-6) shouldBeLessThan 0.4
    }

    test("noise under the improvement threshold around a flat time settles after the settling time") {
        val random = Random(37)
        val s = WarmUpSettling(capSeconds = 10.0, minCalls = 0, minSeconds = 0.0)
        val stoppedAt = run(s) { 2e-6 * (1 + 0.04 * (random.nextDouble() - 0.5)) }
        stoppedAt shouldBeGreaterThan WarmUpSettling.SETTLE_SECONDS
        stoppedAt shouldBeLessThan WarmUpSettling.SETTLE_SECONDS + 0.05
    }

    test("a settled time still warms up for the minimum: 300,000 calls, or 2 s when those would take longer") {
        // 4 µs per call: 300,000 calls after 1.2 s, before 2 s.
        run(WarmUpSettling(capSeconds = 10.0)) { 4e-6 } shouldBe (1.2 plusOrMinus 0.05)
        // 20 µs per call: 300,000 calls would take 6 s; 2 s is the minimum.
        run(WarmUpSettling(capSeconds = 10.0)) { 20e-6 } shouldBe (2.0 plusOrMinus 0.05)
        // 0.5 µs per call: the minimum count is reached first; the settling time decides.
        run(WarmUpSettling(capSeconds = 10.0)) { 0.5e-6 } shouldBe (WarmUpSettling.SETTLE_SECONDS plusOrMinus 0.05)
    }

    test("a time that keeps improving stops at the cap") {
        val s = WarmUpSettling(capSeconds = 1.5)
        val stoppedAt = run(s) { t -> 1e-5 / (1 + 20 * t) }
        stoppedAt shouldBeGreaterThan 1.5
        stoppedAt shouldBeLessThan 1.6
    }

    test("every rank stops after the same chunk: the decision depends only on the values it is given") {
        val a = WarmUpSettling(capSeconds = 10.0)
        val b = WarmUpSettling(capSeconds = 10.0)
        val curve = { t: Double -> if (t < 0.3) 8e-6 else 2e-6 }
        run(a, curve) shouldBe run(b, curve)
    }

    test("a chunk of no calls, time going backwards, or a bad setting is refused") {
        shouldThrow<IllegalArgumentException> { WarmUpSettling(capSeconds = 1.0).settled(0, 0.1) }
        val s = WarmUpSettling(capSeconds = 1.0)
        s.settled(8, 0.1)
        shouldThrow<IllegalArgumentException> { s.settled(8, 0.05) }
        shouldThrow<IllegalArgumentException> { WarmUpSettling(capSeconds = -1.0) }
        shouldThrow<IllegalArgumentException> { WarmUpSettling(capSeconds = 1.0, settleSeconds = 0.0) }
        shouldThrow<IllegalArgumentException> { WarmUpSettling(capSeconds = 1.0, minCalls = -1) }
    }
})
