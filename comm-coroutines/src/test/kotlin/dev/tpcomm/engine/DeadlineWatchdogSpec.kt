package dev.tpcomm.engine

import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.ints.shouldBeGreaterThan
import io.kotest.matchers.shouldBe
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger
import kotlin.concurrent.thread

class DeadlineWatchdogSpec : FunSpec({
    test("fires while the thread that issued the call is blocked, off that thread") {
        val blocked = CountDownLatch(1)
        val fired = CountDownLatch(1)
        var firedOn: Thread? = null
        val deadline = System.nanoTime() + 100_000_000
        val worker = thread { blocked.await() } // stands for a thread stuck in a native call
        val reg = DeadlineWatchdog.register({ now -> if (now - deadline >= 0) { firedOn = Thread.currentThread(); fired.countDown() } }, 5)
        fired.await(5, TimeUnit.SECONDS) shouldBe true
        reg.close()
        (firedOn !== worker) shouldBe true
        firedOn!!.name shouldBe "tpcomm-watchdog"
        blocked.countDown(); worker.join()
    }

    test("a check that throws keeps the watchdog running for the others; close stops the calls") {
        val good = AtomicInteger()
        val bad = DeadlineWatchdog.register({ error("bug in a backend's check") }, 1)
        val ok = DeadlineWatchdog.register({ good.incrementAndGet() }, 1)
        Thread.sleep(100)
        good.get() shouldBeGreaterThan 5
        ok.close(); bad.close()
        Thread.sleep(20) // a scan that took its snapshot before close() may still make one call
        val after = good.get()
        Thread.sleep(50)
        (good.get() - after) shouldBe 0
    }

    test("a weak registration is dropped once its target is unreachable") {
        val count = AtomicInteger()
        var target: DeadlineWatchdog.Watched? = DeadlineWatchdog.Watched { count.incrementAndGet() }
        DeadlineWatchdog.register(target!!, 1, weak = true)
        Thread.sleep(30)
        target = null
        repeat(20) { System.gc(); Thread.sleep(10) }
        val c = count.get()
        Thread.sleep(50)
        count.get() shouldBe c
    }
})
