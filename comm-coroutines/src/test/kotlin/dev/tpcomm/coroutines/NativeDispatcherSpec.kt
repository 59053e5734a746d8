package dev.tpcomm.coroutines

import dev.tpcomm.engine.NativeDispatcher
import dev.tpcomm.engine.NativeDispatcherClosedException
import dev.tpcomm.engine.NativeRequest
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainExactly
import io.kotest.matchers.shouldBe
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.TimeoutCancellationException
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext
import kotlinx.coroutines.withTimeout
import java.util.Collections
import java.util.concurrent.atomic.AtomicBoolean
import java.util.concurrent.atomic.AtomicInteger
import kotlin.time.Duration.Companion.seconds

/** A fake native request that completes after [pollsNeeded] polls, or fails with [failure]. */
private class FakeRequest(private val pollsNeeded: Int, private val failure: Throwable? = null) : NativeRequest {
    val polls = AtomicInteger()
    val pollThreads: MutableSet<Thread> = Collections.synchronizedSet(HashSet())
    override fun poll(): Boolean {
        pollThreads += Thread.currentThread()
        val n = polls.incrementAndGet()
        if (n >= pollsNeeded) {
            failure?.let { throw it }
            return true
        }
        return false
    }
}

/** A request completed from outside, like a device event recorded by another thread. */
private class Flag : NativeRequest {
    val done = AtomicBoolean(false)
    override fun poll(): Boolean = done.get()
}

class NativeDispatcherSpec : FunSpec({
    timeout = 30_000

    test("execute runs on the dedicated thread in FIFO order and returns values") {
        NativeDispatcher("t-fifo").use { d ->
            val order = Collections.synchronizedList(ArrayList<Int>())
            runBlocking {
                val jobs = (0 until 200).map { i -> async(Dispatchers.Default, start = CoroutineStart.UNDISPATCHED) { d.execute { order += i; Thread.currentThread().name.substringBefore(" @") } } }
                jobs.awaitAll().toSet() shouldBe setOf("t-fifo")
            }
            order shouldContainExactly (0 until 200).toList()
        }
    }

    test("execute on the native thread runs inline without a hop") {
        NativeDispatcher("t-inline").use { d ->
            runBlocking {
                withContext(d) {
                    val thread = Thread.currentThread()
                    var ranInline = false
                    d.execute { ranInline = Thread.currentThread() === thread }
                    ranInline shouldBe true
                    d.isNativeThread shouldBe true
                }
            }
        }
    }

    test("await returns without suspending when the request completed already") {
        NativeDispatcher("t-fast").use { d ->
            runBlocking {
                withContext(d) {
                    val r = FakeRequest(1)
                    d.await(r)
                    r.polls.get() shouldBe 1
                    d.inFlightCount shouldBe 0
                }
            }
        }
    }

    test("requests complete out of order and each waiter resumes when its own request completes; polls only on the native thread") {
        NativeDispatcher("t-order").use { d ->
            val flags = List(3) { Flag() }
            val finished = Collections.synchronizedList(ArrayList<Int>())
            runBlocking {
                val jobs = flags.mapIndexed { i, f -> launch(Dispatchers.Default) { d.await(f); finished += i } }
                while (d.inFlightCount < 3) delay(1)
                for (i in listOf(1, 2, 0)) {
                    flags[i].done.set(true)
                    withTimeout(5.seconds) { while (i !in finished) delay(1) }
                }
                jobs.forEach { it.join() }
            }
            finished shouldContainExactly listOf(1, 2, 0)
            val counted = FakeRequest(50)
            runBlocking { d.await(counted) }
            counted.pollThreads.map { it.name.substringBefore(" @") }.toSet() shouldBe setOf("t-order")
        }
    }

    test("a request that completes much later is still observed (park with backoff, then wake)") {
        NativeDispatcher("t-late").use { d ->
            val flag = Flag()
            runBlocking {
                val waiter = async(Dispatchers.Default) { d.await(flag); System.nanoTime() }
                delay(300)
                waiter.isCompleted shouldBe false
                val set = System.nanoTime()
                flag.done.set(true)
                val woke = waiter.await()
                // the backoff is capped at maxParkNanos (200 µs); the bound is loose because CI machines are loaded
                val wakeMillis = (woke - set) / 1_000_000
                (wakeMillis <= 2_000) shouldBe true
            }
        }
    }

    test("a failing poll fails the waiter with that exception and the dispatcher keeps working") {
        NativeDispatcher("t-error").use { d ->
            runBlocking {
                val boom = IllegalStateException("native error 17")
                shouldThrow<IllegalStateException> { d.await(FakeRequest(3, boom)) }.message shouldBe "native error 17"
                d.await(FakeRequest(2))
                d.execute { 42 } shouldBe 42
            }
        }
    }

    test("withTimeout around await times out; the request stays polled until it completes") {
        NativeDispatcher("t-timeout").use { d ->
            val flag = Flag()
            runBlocking {
                shouldThrow<TimeoutCancellationException> { withTimeout(100) { d.await(flag) } }
                d.execute { d.inFlightCount } shouldBe 1
                flag.done.set(true)
                var tries = 0
                while (d.inFlightCount != 0 && tries++ < 1000) delay(1)
                d.inFlightCount shouldBe 0
            }
        }
    }

    test("cancelling a waiter resumes it at once with CancellationException") {
        NativeDispatcher("t-cancel").use { d ->
            runBlocking {
                val flag = Flag()
                val job = async(Dispatchers.Default) { d.await(flag) }
                delay(50)
                job.cancel()
                shouldThrow<CancellationException> { job.await() }
                flag.done.set(true)
            }
        }
    }

    test("close fails waiters in flight and later calls with NativeDispatcherClosedException") {
        val d = NativeDispatcher("t-close")
        runBlocking {
            val waiter = async(Dispatchers.Default) { runCatching { d.await(Flag()) }.exceptionOrNull() }
            while (d.inFlightCount == 0) delay(1)
            withContext(Dispatchers.IO) { d.close() }
            (waiter.await() is NativeDispatcherClosedException) shouldBe true
            shouldThrow<NativeDispatcherClosedException> { d.execute { 1 } }
            shouldThrow<NativeDispatcherClosedException> { d.await(FakeRequest(1)) }
            d.close() // idempotent
        }
    }

    test("work dispatched after close is cancelled, not lost") {
        val d = NativeDispatcher("t-after-close")
        d.close()
        runBlocking {
            val r = runCatching { withContext(d) { 1 } }
            (r.exceptionOrNull() is CancellationException) shouldBe true
        }
    }

    test("an idle dispatcher parks instead of spinning") {
        NativeDispatcher("t-idle").use { d ->
            runBlocking { d.execute { } }
            Thread.sleep(100)
            val bean = java.lang.management.ManagementFactory.getThreadMXBean()
            val id = Thread.getAllStackTraces().keys.first { it.name.startsWith("t-idle") }.threadId()
            val before = bean.getThreadCpuTime(id)
            Thread.sleep(300)
            val used = bean.getThreadCpuTime(id) - before
            (used < 50_000_000) shouldBe true // far below 300 ms of spinning
        }
    }

    test("many concurrent awaits from many coroutines all complete") {
        NativeDispatcher("t-many").use { d ->
            runBlocking {
                withTimeout(20.seconds) {
                    (0 until 1000).map { i -> async(Dispatchers.Default) { d.await(FakeRequest(1 + i % 7)); i } }.awaitAll().sum() shouldBe 499500
                }
            }
        }
    }
    test("handOff returns the block's result to a spinning caller, runs it on the thread, and after work dispatched before it") {
        NativeDispatcher("t-handoff", idleSpinNanos = 200_000).use { d ->
            val order = Collections.synchronizedList(ArrayList<String>())
            runBlocking {
                d.dispatch(kotlin.coroutines.EmptyCoroutineContext, Runnable { order += "before" })
                val thread = d.handOff(1_000_000) { order += "block"; Thread.currentThread() }
                thread.name shouldBe "t-handoff"
                // A block slower than the spin: the caller suspends, then gets the result.
                d.handOff(1_000) { Thread.sleep(20); 42 } shouldBe 42
                shouldThrow<IllegalStateException> { d.handOff(1_000_000) { throw IllegalStateException("boom") } }.message shouldBe "boom"
            }
            order shouldContainExactly listOf("before", "block")
        }
    }

    test("handOff: a caller cancelled while its block is queued is resumed at once and the block never starts") {
        NativeDispatcher("t-handoff-cancel").use { d ->
            val started = AtomicBoolean(false)
            val gate = java.util.concurrent.CountDownLatch(1)
            runBlocking {
                d.dispatch(kotlin.coroutines.EmptyCoroutineContext, Runnable { gate.await() }) // keeps the thread busy
                val job = launch(Dispatchers.Default) { d.handOff(0) { started.set(true) } }
                delay(50)
                job.cancel()
                job.join()
                gate.countDown()
                d.execute { } // everything queued before has run
            }
            started.get() shouldBe false
        }
    }
})
