@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.coroutines

import dev.tpcomm.engine.Backoff
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe

class BackoffSpec : FunSpec({
    test("spins, then yields, then parks from 1 us doubling up to the cap; reset starts over") {
        val b = Backoff(spinIterations = 3, yieldIterations = 2, maxParkNanos = 5_000)
        val steps = List(10) { b.advance() }
        steps shouldBe listOf(Backoff.SPIN, Backoff.SPIN, Backoff.SPIN, Backoff.YIELD, Backoff.YIELD, 1_000L, 2_000L, 4_000L, 5_000L, 5_000L)
        b.reset()
        b.advance() shouldBe Backoff.SPIN
    }

    test("idle hands parks to the caller's park function and nothing else") {
        val b = Backoff(spinIterations = 1, yieldIterations = 1, maxParkNanos = 100_000)
        val parks = ArrayList<Long>()
        repeat(5) { b.idle { parks += it } }
        parks shouldBe listOf(1_000L, 2_000L, 4_000L)
    }

    test("a long wait never parks longer than the cap, however many polls") {
        val b = Backoff.forLibraryThread()
        var last = 0L
        repeat(100 + 4_096 + 100) { last = b.advance() }
        last shouldBe 100_000L
    }
})
