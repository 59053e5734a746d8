package dev.tpcomm.coroutines

import dev.tpcomm.engine.NativeDispatcher
import dev.tpcomm.engine.NativeRequest
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainExactly
import io.kotest.matchers.shouldBe
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import java.util.Collections
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicBoolean
import kotlin.concurrent.thread

/** [NativeDispatcher.runHereIfIdle]: a caller runs a blocking block itself when, and only when, the thread is idle. */
class NativeDispatcherRunHereSpec : FunSpec({
    timeout = 30_000

    /** Waits until the dispatcher's thread has parked with nothing to do (it releases the library then). */
    fun NativeDispatcher.settle() {
        val deadline = System.nanoTime() + 5_000_000_000L
        while (!runHereIfIdle {}) {
            check(System.nanoTime() < deadline) { "the dispatcher never became idle" }
            Thread.sleep(1)
        }
    }

    test("an idle dispatcher lets the caller run the block on its own thread") {
        NativeDispatcher("t-here").use { d ->
            d.settle()
            var ranOn: Thread? = null
            var here = false
            d.runHereIfIdle { ranOn = Thread.currentThread(); here = d.isRunningHere } shouldBe true
            ranOn shouldBe Thread.currentThread()
            here shouldBe true
            d.isRunningHere shouldBe false
        }
    }

    test("work queued or running on the thread makes the caller hand over (returns false, runs nothing)") {
        NativeDispatcher("t-busy").use { d ->
            d.settle()
            val entered = CountDownLatch(1)
            val release = CountDownLatch(1)
            d.dispatch(kotlin.coroutines.EmptyCoroutineContext, Runnable { entered.countDown(); release.await() })
            entered.await(5, TimeUnit.SECONDS) shouldBe true
            val ran = AtomicBoolean(false)
            d.runHereIfIdle { ran.set(true) } shouldBe false // running
            d.dispatch(kotlin.coroutines.EmptyCoroutineContext, Runnable { })
            d.runHereIfIdle { ran.set(true) } shouldBe false // running and queued
            release.countDown()
            ran.get() shouldBe false
            d.settle()
        }
    }

    test("a request in flight makes the caller hand over") {
        NativeDispatcher("t-inflight").use { d ->
            val done = AtomicBoolean(false)
            runBlocking {
                val waiter = launch(start = CoroutineStart.UNDISPATCHED) { d.await(NativeRequest { done.get() }) }
                while (d.inFlightCount == 0) Thread.sleep(1)
                d.runHereIfIdle { error("must not run") } shouldBe false
                done.set(true)
                waiter.join()
            }
            d.settle()
        }
    }

    test("right after a hand-off returns, the caller may run here again (the thread is only finishing up)") {
        // A caller resumed by the thread comes back while the thread is still on its way to park:
        // it must not lose that race every time and stay on the hand-off path (what a loop of
        // natural calls did: 15-30 µs per 8-byte all-reduce instead of 2).
        NativeDispatcher("t-comeback").use { d ->
            d.settle()
            var here = 0
            runBlocking {
                repeat(3_000) { i ->
                    d.execute { } // a hand-off: runs on the thread, which resumes this coroutine
                    if (d.runHereIfIdle { } && i >= 1_000) here++ // the first 1000 warm up the JIT
                }
            }
            withClue("$here of 2000 ran here") { (here >= 1_900) shouldBe true }
        }
    }

    test("work dispatched while the block runs waits for it, then runs in order") {
        NativeDispatcher("t-order").use { d ->
            d.settle()
            val order = Collections.synchronizedList(ArrayList<String>())
            val ranAfter = CountDownLatch(1)
            d.runHereIfIdle {
                order += "block start"
                d.dispatch(kotlin.coroutines.EmptyCoroutineContext, Runnable { order += "queued"; ranAfter.countDown() })
                Thread.sleep(200) // the thread was woken by the dispatch and must wait
                order += "block end"
            } shouldBe true
            ranAfter.await(5, TimeUnit.SECONDS) shouldBe true
            order shouldContainExactly listOf("block start", "block end", "queued")
        }
    }

    test("the block's exception propagates and the dispatcher stays usable") {
        NativeDispatcher("t-throw").use { d ->
            d.settle()
            shouldThrow<IllegalStateException> { d.runHereIfIdle { error("boom") } }.message shouldBe "boom"
            runBlocking { d.execute { Thread.currentThread().name.substringBefore(" @") } } shouldBe "t-throw"
            d.settle()
        }
    }

    test("on the dispatcher's own thread, and once closed, it runs nothing") {
        val d = NativeDispatcher("t-closed")
        runBlocking { d.execute { d.runHereIfIdle { error("must not run") } } } shouldBe false
        d.close()
        d.runHereIfIdle { error("must not run") } shouldBe false
    }

    test("close while a caller runs a block waits for the block, then ends the thread") {
        val d = NativeDispatcher("t-close-during")
        d.settle()
        val inBlock = CountDownLatch(1)
        val caller = thread { d.runHereIfIdle { inBlock.countDown(); Thread.sleep(300) } }
        inBlock.await(5, TimeUnit.SECONDS) shouldBe true
        d.close() // joins the thread, which first waits for the block
        caller.join(5_000)
        caller.isAlive shouldBe false
        d.isClosed shouldBe true
    }
})
