package dev.tpcomm.coroutines.async

import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.allReduceAsync
import dev.tpcomm.coroutines.awaitAll
import dev.tpcomm.coroutines.awaitFirst
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.async
import kotlinx.coroutines.delay
import kotlinx.coroutines.supervisorScope
import kotlinx.coroutines.test.runTest
import kotlin.time.Duration
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

class AwaitAllSpec : FunSpec({
    test("awaitAll with a deadline returns every result in order") {
        val sums = fakeWorld(2) { c ->
            val hs = (1..4).map { i -> allReduceAsync(c, Tensor.of(floatArrayOf(i.toFloat()))) }
            hs.awaitAll(5.seconds, c).map { it.toFloatArray()[0] }
        }
        sums shouldBe listOf(listOf(2f, 4f, 6f, 8f), listOf(2f, 4f, 6f, 8f))
    }

    vtest("awaitAll past its deadline throws CommunicationTimeoutException naming the pending handles, and cancels them") {
        val (c0, c1) = FakeWorld(2).communicators()
        supervisorScope {
            val done = allReduceAsync(c0, Tensor.of(floatArrayOf(1f)))
            async { c1.allReduce(Tensor.of(floatArrayOf(1f))) }.await()
            val pending = allReduceAsync(c0, Tensor.of(floatArrayOf(1f)))   // rank 1 never joins
            val e = shouldThrow<CommunicationTimeoutException> { listOf(done, pending).awaitAll(200.milliseconds, c0) }
            e.operation shouldBe "awaitAll"
            e.rank shouldBe 0
            e.backend shouldBe "fake"
            e.message shouldContain "1 of 2 handles (indices 1)"
            pending.isCancelled shouldBe true
            // the cancellation aborted the communicator: nothing is left hanging on rank 1
            shouldThrow<CommunicatorAbortedException> { c1.barrier() }
        }
    }

    vtest("awaitAll with cancelOnTimeout = false leaves the handles running so the caller can wait again") {
        val (c0, c1) = FakeWorld(2).communicators()
        supervisorScope {
            val pending = allReduceAsync(c0, Tensor.of(floatArrayOf(1f)))
            shouldThrow<CommunicationTimeoutException> { listOf(pending).awaitAll(100.milliseconds, cancelOnTimeout = false) }
                .backend shouldBe "unknown"
            pending.isActive shouldBe true
            c1.allReduce(Tensor.of(floatArrayOf(2f)))
            listOf(pending).awaitAll(1.seconds).single().toFloatArray()[0] shouldBe 3f
        }
    }

    vtest("awaitAll throws the first failure at once") {
        supervisorScope {
            val never = CompletableDeferred<Int>()
            val failing = async<Int> { delay(10); throw IllegalStateException("boom") }
            shouldThrow<IllegalStateException> { listOf(never, failing).awaitAll(10.seconds) }.message shouldBe "boom"
            never.isActive shouldBe true
        }
    }

    vtest("awaitFirst returns the index and value of the first handle to complete and leaves the others running") {
        supervisorScope {
            val slow = async { delay(500); "slow" }
            val fast = async { delay(100); "fast" }
            val first = listOf(slow, fast).awaitFirst(1.seconds)
            first shouldBe IndexedValue(1, "fast")
            slow.isActive shouldBe true
            slow.await() shouldBe "slow"
        }
    }

    vtest("awaitFirst with an already completed handle returns it at once") {
        val done = CompletableDeferred("x")
        listOf(CompletableDeferred(), done).awaitFirst(1.seconds) shouldBe IndexedValue(1, "x")
    }

    vtest("awaitFirst past its deadline throws CommunicationTimeoutException and cancels every handle") {
        val a = CompletableDeferred<Int>()
        val b = CompletableDeferred<Int>()
        val e = shouldThrow<CommunicationTimeoutException> { listOf(a, b).awaitFirst(50.milliseconds) }
        e.operation shouldBe "awaitFirst"
        e.message shouldContain "none of 2 handles"
        a.isCancelled shouldBe true
        b.isCancelled shouldBe true
    }

    vtest("awaitFirst rethrows the failure of the first handle to complete") {
        supervisorScope {
            val failing = async<Int> { delay(10); throw IllegalArgumentException("bad") }
            shouldThrow<IllegalArgumentException> { listOf(CompletableDeferred(), failing).awaitFirst(1.seconds) }
        }
    }

    vtest("bad arguments are rejected with a message saying what to pass") {
        shouldThrow<IllegalArgumentException> { emptyList<CompletableDeferred<Int>>().awaitFirst(1.seconds) }
            .message shouldContain "at least one handle"
        shouldThrow<IllegalArgumentException> { listOf(CompletableDeferred(1)).awaitAll(Duration.ZERO) }
            .message shouldContain "timeout must be positive"
        shouldThrow<IllegalArgumentException> { listOf(CompletableDeferred(1)).awaitFirst((-1).seconds) }
        emptyList<CompletableDeferred<Int>>().awaitAll(1.seconds) shouldBe emptyList()
    }
})
