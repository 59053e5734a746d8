package dev.tpcomm.spi

import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.CommunicatorAbortedException
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.types.shouldBeSameInstanceAs
import java.util.concurrent.CountDownLatch
import java.util.concurrent.atomic.AtomicInteger
import kotlin.concurrent.thread

class FailureStateSpec : FunSpec({
    test("the first cause wins, listeners run once, and later calls carry the cause and the dump") {
        val errors = CommunicationErrors(2, "mpi") { "{\"records\":[]}" }
        val s = FailureState(errors)
        val ran = AtomicInteger()
        s.onAbort { ran.incrementAndGet() }
        val first = errors.timeout("allReduce", 5, "rank 1 did not arrive within 5s")
        val second = errors.failure("barrier", 6, "other")
        s.abort(first) shouldBe true
        s.abort(second) shouldBe false
        s.cause shouldBeSameInstanceAs first
        ran.get() shouldBe 1
        val e = shouldThrow<CommunicatorAbortedException> { s.ensureUsable("broadcast", 7) }
        e.cause shouldBeSameInstanceAs first
        e.rank shouldBe 2; e.backend shouldBe "mpi"; e.operation shouldBe "broadcast"; e.sequenceNumber shouldBe 7
        e.flightRecorderDump shouldBe "{\"records\":[]}"
        e.message shouldBe "[mpi rank 2, broadcast #7] the communicator was aborted by an earlier failure " +
            "(allReduce #5: rank 1 did not arrive within 5s); create a new communicator to continue"
        first.shouldBeInstanceOfTimeout()
    }

    test("a listener added after the abort runs at once; racing aborts record exactly one cause") {
        repeat(200) {
            val s = FailureState(CommunicationErrors(0, "local"))
            val calls = AtomicInteger()
            val go = CountDownLatch(1)
            val threads = (0 until 4).map { i -> thread { go.await(); s.abort(RuntimeException("t$i")) } }
            val adder = thread { go.await(); s.onAbort { calls.incrementAndGet() } }
            go.countDown()
            threads.forEach { it.join() }; adder.join()
            calls.get() shouldBe 1
        }
    }

    test("a dump that throws does not hide the failure") {
        val errors = CommunicationErrors(0, "nccl") { error("recorder broken") }
        errors.failure("send", 1, "x").flightRecorderDump!!.contains("recorder broken") shouldBe true
    }

    test("building an exception changes no state; one convention for lifecycle steps") {
        val s = FailureState(CommunicationErrors(0, "nccl"))
        val e = s.errors.timeout(CommunicationErrors.CREATE, CommunicationErrors.NO_SEQUENCE, "init did not complete")
        s.isAborted shouldBe false
        e.operation shouldBe "create"
        e.sequenceNumber shouldBe -1L
    }

    test("closed() makes later calls say the communicator was closed") {
        val s = FailureState(CommunicationErrors(1, "local"))
        s.abort(s.errors.closed())
        shouldThrow<CommunicatorAbortedException> { s.ensureUsable("allReduce", 3) }.reason shouldBe
            "the communicator was closed; create a new one"
    }
})

private fun Throwable.shouldBeInstanceOfTimeout() {
    (this is CommunicationTimeoutException) shouldBe true
}
