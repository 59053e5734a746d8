@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.coroutines

import dev.tpcomm.engine.AbortEscalation
import dev.tpcomm.engine.AbortIncompleteException
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.ints.shouldBeGreaterThan
import io.kotest.matchers.longs.shouldBeLessThan
import io.kotest.matchers.nulls.shouldBeNull
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.types.shouldBeInstanceOf
import java.util.concurrent.atomic.AtomicInteger
import java.util.concurrent.atomic.AtomicReference

/** A forced abort that must retry is bounded: it stops at its bound (or at a failing attempt) with a named exception, and its thread ends. */
class AbortEscalationTest : FunSpec({
    test("an abort that never gets in stops at its bound with AbortIncompleteException handed over, and the guard's thread ends") {
        val attempts = AtomicInteger()
        val gaveUp = AtomicReference<AbortIncompleteException?>()
        val start = System.nanoTime()
        val t = AbortEscalation.retrying("test-abort", 50, 500, "test: abort", attempt = {
            attempts.incrementAndGet(); Thread.sleep(50); false // the library stays busy
        }, gaveUp = { gaveUp.set(it) })
        t.join(5_000)
        val ms = (System.nanoTime() - start) / 1_000_000
        t.isAlive shouldBe false
        ms shouldBeLessThan 1_500 // grace 50 + bound 500 + one attempt of 50
        attempts.get() shouldBeGreaterThan 1
        val e = gaveUp.get()!!
        e.message!! shouldContain "test: abort"
        e.message!! shouldContain "bound 500 ms"
    }

    test("an abort that gets in stops retrying at once and reports nothing") {
        val attempts = AtomicInteger()
        val gaveUp = AtomicReference<AbortIncompleteException?>()
        val t = AbortEscalation.retrying("test-abort", 0, 10_000, "test: abort", attempt = { attempts.incrementAndGet() == 3 }, gaveUp = { gaveUp.set(it) })
        t.join(5_000)
        t.isAlive shouldBe false
        attempts.get() shouldBe 3
        gaveUp.get().shouldBeNull()
    }

    test("an attempt that throws ends the escalation with that cause, without retrying") {
        val attempts = AtomicInteger()
        val gaveUp = AtomicReference<AbortIncompleteException?>()
        val t = AbortEscalation.retrying("test-abort", 0, 10_000, "test: abort", attempt = {
            attempts.incrementAndGet(); error("ncclCommAbort crashed")
        }, gaveUp = { gaveUp.set(it) })
        t.join(5_000)
        t.isAlive shouldBe false
        attempts.get() shouldBe 1
        gaveUp.get()!!.cause.shouldBeInstanceOf<IllegalStateException>().message shouldBe "ncclCommAbort crashed"
    }
})
