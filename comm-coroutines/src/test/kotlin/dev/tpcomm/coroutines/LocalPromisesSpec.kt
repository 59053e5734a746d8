package dev.tpcomm.coroutines

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldBeIn
import io.kotest.matchers.comparables.shouldBeLessThan
import io.kotest.matchers.nulls.shouldNotBeNull
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.string.shouldNotBeEmpty
import io.kotest.matchers.types.shouldBeInstanceOf
import io.kotest.property.Arb
import io.kotest.property.arbitrary.element
import io.kotest.property.arbitrary.int
import io.kotest.property.checkAll
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitCancellation
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import kotlinx.coroutines.withContext
import kotlinx.coroutines.withTimeout
import kotlinx.coroutines.yield
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.minutes
import kotlin.time.Duration.Companion.seconds
import kotlin.time.TimeSource

/**
 * The promises of `runLocalWorld`, cancellation and deadlines, tried as a user's program would:
 * real coroutines on real dispatchers, real deadlines, and a test timeout that must never be what
 * ends a test (a hang shows up as the framework's timeout instead of the library's exception).
 */
class LocalPromisesSpec : FunSpec({
    val short = CommConfig(timeout = 300.milliseconds)

    test("a rank stuck in awaitCancellation() does not hang runLocalWorld: the others' timeout comes back").config(timeout = 20.seconds) {
        val start = TimeSource.Monotonic.markNow()
        val e = shouldThrow<CommunicationTimeoutException> {
            runLocalWorld(3, short) { comm ->
                if (comm.rank == 0) awaitCancellation()
                comm.allReduce(Tensor.of(floatArrayOf(1f)))
            }
        }
        e.operation shouldBe "allReduce"
        e.message shouldContain "[0]"
        start.elapsedNow() shouldBeLessThan 3.seconds
    }

    test("a rank spinning in a yield() loop does not hang runLocalWorld").config(timeout = 20.seconds) {
        val start = TimeSource.Monotonic.markNow()
        shouldThrow<CommunicationTimeoutException> {
            withContext(Dispatchers.Default) {
                runLocalWorld(2, short) { comm ->
                    if (comm.rank == 1) while (true) yield()
                    comm.barrier()
                }
            }
        }.operation shouldBe "barrier"
        start.elapsedNow() shouldBeLessThan 3.seconds
    }

    test("a rank waiting on a hand-off from a rank that threw: runLocalWorld rethrows the thrower's exception at once").config(timeout = 20.seconds) {
        val start = TimeSource.Monotonic.markNow()
        val handOff = CompletableDeferred<Tensor>()
        val e = shouldThrow<IllegalStateException> {
            runLocalWorld(2, CommConfig(timeout = 1.minutes)) { comm ->
                if (comm.rank == 1) {
                    delay(20)
                    check(false) { "rank 1 could not build its input" }
                    handOff.complete(Tensor.of(floatArrayOf(1f)))
                } else {
                    comm.allReduce(handOff.await())
                }
            }
        }
        e.message shouldBe "rank 1 could not build its input"
        start.elapsedNow() shouldBeLessThan 5.seconds
    }

    test("after the first failure, a rank that reaches a collective within the grace ends with a named exception, not a cancellation").config(timeout = 20.seconds) {
        val boom = IllegalStateException("rank 1 failed")
        val e = shouldThrow<IllegalStateException> {
            runLocalWorld(2, CommConfig(timeout = 1.minutes)) { comm ->
                if (comm.rank == 1) throw boom
                delay(100) // still computing when rank 1 fails
                comm.allReduce(Tensor.of(floatArrayOf(1f)))
            }
        }
        val original = if (e === boom) e else e.cause.shouldNotBeNull()
        original.suppressed.single().shouldBeInstanceOf<CommunicatorAbortedException>().rank shouldBe 0
    }

    test("property: whichever rank throws and whatever the others wait on, the first cause surfaces, not the test timeout").config(timeout = 30.seconds) {
        checkAll(8, Arb.int(2..4), Arb.int(0..3), Arb.element("await", "yield", "collective", "handoff")) { n, thrower0, wait ->
            val thrower = thrower0 % n
            val handOff = CompletableDeferred<Unit>()
            val e = shouldThrow<IllegalStateException> {
                withContext(Dispatchers.Default) {
                    runLocalWorld(n, CommConfig(timeout = 2.seconds)) { comm ->
                        if (comm.rank == thrower) {
                            delay(10)
                            throw IllegalStateException("rank $thrower failed first")
                        }
                        when (wait) {
                            "await" -> awaitCancellation()
                            "yield" -> while (true) yield()
                            "collective" -> comm.allReduce(Tensor.of(floatArrayOf(1f)))
                            else -> handOff.await()
                        }
                    }
                }
            }
            e.message shouldBe "rank $thrower failed first"
        }
    }

    test("cancelling allReduceAsync inside the watchdog's window aborts the world; the cancelled tensor is never written").config(timeout = 20.seconds) {
        // timeout 5 s: the watchdog looks every 50 ms, so a cancellation it must notice by itself would be missed here
        LocalWorld(2, CommConfig(timeout = 5.seconds)).use { world ->
            val a = Tensor.of(floatArrayOf(1f, 2f))
            coroutineScope {
                val h = allReduceAsync(world.communicator(0), a)
                delay(100)
                h.cancel()
                // The peer arrives at once, well within one watchdog period.
                val peer = runCatching { world.communicator(1).allReduce(Tensor.of(floatArrayOf(10f, 20f))) }.exceptionOrNull()
                h.join()
                h.isCancelled shouldBe true
                a.toFloatArray().toList() shouldBe listOf(1f, 2f)
                world.isAborted shouldBe true
                peer.shouldBeInstanceOf<CommunicatorAbortedException>().message shouldContain "cancelled"
            }
        }
    }

    test("close() of a tensor while its allReduceAsync is in flight defers the free: the collective completes for every rank").config(timeout = 20.seconds) {
        LocalWorld(2, CommConfig(timeout = 5.seconds)).use { world ->
            val a = Tensor.zeros(DType.Float32, 1024).also { t -> for (i in 0 until 1024) t.segment.setAtIndex(java.lang.foreign.ValueLayout.JAVA_FLOAT, i.toLong(), 1f) }
            val b = Tensor.zeros(DType.Float32, 1024).also { t -> for (i in 0 until 1024) t.segment.setAtIndex(java.lang.foreign.ValueLayout.JAVA_FLOAT, i.toLong(), 2f) }
            coroutineScope {
                val h = allReduceAsync(world.communicator(0), a)
                delay(50)
                a.close() // the user frees the tensor while rank 1 has not arrived yet
                a.isClosed shouldBe true
                world.communicator(1).allReduce(b)
                h.await()
            }
            world.isAborted shouldBe false
            b.toFloatArray().all { it == 3f } shouldBe true
            // Freed once the collective was done: the memory is no longer accessible.
            shouldThrow<IllegalStateException> { a.segment.getAtIndex(java.lang.foreign.ValueLayout.JAVA_FLOAT, 0L) }
            // A closed tensor is refused by new calls, with a message naming the call.
            shouldThrow<IllegalArgumentException> { world.communicator(0).allReduce(a) }.message shouldContain "allReduce"
        }
    }

    test("close() of a receive buffer while its recv is posted: the send and the receive complete, then the buffer is freed").config(timeout = 20.seconds) {
        LocalWorld(2, CommConfig(timeout = 5.seconds)).use { world ->
            val target = Tensor.zeros(DType.Float32, 4)
            coroutineScope {
                val h = async { world.communicator(1).recv(target, src = 0, tag = 3) }
                delay(50)
                target.close() // the receiver's buffer is closed while the receive waits
                world.communicator(0).send(Tensor.of(floatArrayOf(1f, 2f, 3f, 4f)), dst = 1, tag = 3)
                h.await().byteSize shouldBe 16L
            }
            world.isAborted shouldBe false
            shouldThrow<IllegalStateException> { target.segment }
        }
    }

    test("cancel() racing a running data movement: once cancel() returns, the cancelled rank's tensor never changes again").config(timeout = 60.seconds) {
        val n = 4 shl 20 // 16 MiB per rank: the data movement takes milliseconds
        checkAll(6, Arb.int(0..3_000)) { lagMicros ->
            LocalWorld(2, CommConfig(timeout = 30.seconds)).use { world ->
                val a = Tensor.zeros(DType.Float32, n).also { t -> for (i in 0 until n step 4096) t.setFloat(i.toLong(), 1f) }
                val b = Tensor.zeros(DType.Float32, n).also { t -> for (i in 0 until n step 4096) t.setFloat(i.toLong(), 2f) }
                withContext(Dispatchers.Default) {
                    val h = allReduceAsync(world.communicator(0), a)
                    val peer = async { runCatching { world.communicator(1).allReduce(b) } }
                    val until = System.nanoTime() + lagMicros * 1000L
                    while (System.nanoTime() < until) Thread.onSpinWait()
                    h.cancel()
                    val snapshot = a.toFloatArray()
                    peer.await()
                    h.join()
                    a.toFloatArray().contentEquals(snapshot) shouldBe true
                    // All or nothing: either the reduction ran (1 + 2) or it never started.
                    snapshot[0] shouldBeIn listOf(1f, 3f)
                    snapshot[n - 4096] shouldBe snapshot[0]
                }
            }
        }
    }

    test("withTimeout around a collective raises CommunicationTimeoutException at its deadline; the peers are aborted").config(timeout = 20.seconds) {
        LocalWorld(2, CommConfig(timeout = 1.minutes)).use { world ->
            val start = TimeSource.Monotonic.markNow()
            val e = shouldThrow<CommunicationTimeoutException> {
                withTimeout(200.milliseconds) { world.communicator(0).allReduce(Tensor.of(floatArrayOf(1f))) }
            }
            start.elapsedNow() shouldBeLessThan 1.seconds
            e.operation shouldBe "allReduce"
            e.rank shouldBe 0
            e.flightRecorderDump.shouldNotBeNull() shouldContain "allReduce"
            world.isAborted shouldBe true
            shouldThrow<CommunicatorAbortedException> { world.communicator(1).allReduce(Tensor.of(floatArrayOf(1f))) }
        }
    }

    test("withTimeout around recv raises CommunicationTimeoutException at its deadline; the receive is withdrawn and the communicator stays usable").config(timeout = 20.seconds) {
        LocalWorld(2, CommConfig(timeout = 1.minutes)).use { world ->
            val c0 = world.communicator(0)
            val c1 = world.communicator(1)
            val target = Tensor.of(floatArrayOf(-1f, -1f))
            val start = TimeSource.Monotonic.markNow()
            val e = shouldThrow<CommunicationTimeoutException> { withTimeout(200.milliseconds) { c1.recv(target, src = 0, tag = 7) } }
            start.elapsedNow() shouldBeLessThan 1.seconds
            e.operation shouldBe "recv"
            e.rank shouldBe 1
            e.backend shouldBe "local"
            e.message shouldContain "deadline"
            e.flightRecorderDump.shouldNotBeNull() shouldContain "recv"
            // The withdrawn receive never consumes or writes: the next message goes to the next receive.
            c0.send(Tensor.of(floatArrayOf(3f, 4f)), dst = 1, tag = 7)
            target.toFloatArray().toList() shouldBe listOf(-1f, -1f)
            world.isAborted shouldBe false
            val next = Tensor.zeros(DType.Float32, 2)
            c1.recv(next, src = 0, tag = 7).source shouldBe 0
            next.toFloatArray().toList() shouldBe listOf(3f, 4f)
            // probe under a deadline: the same exception type.
            shouldThrow<CommunicationTimeoutException> { withTimeout(100.milliseconds) { c1.probe(src = 0, tag = 8) } }.operation shouldBe "probe"
        }
    }

    test("awaitAll(timeout, comm) raises CommunicationTimeoutException at its deadline naming the operation").config(timeout = 20.seconds) {
        LocalWorld(2, CommConfig(timeout = 1.minutes)).use { world ->
            val c0 = world.communicator(0)
            val start = TimeSource.Monotonic.markNow()
            val e = coroutineScope {
                val h = allReduceAsync(c0, Tensor.of(floatArrayOf(1f)))
                shouldThrow<CommunicationTimeoutException> { listOf(h).awaitAll(timeout = 200.milliseconds, comm = c0) }
            }
            start.elapsedNow() shouldBeLessThan 1.seconds
            e.operation.shouldNotBeEmpty()
            e.rank shouldBe 0
            e.backend shouldBe "local"
            world.isAborted shouldBe true
        }
    }

    test("every CommunicatorAbortedException of a closed communicator carries the flight-recorder dump") {
        val world = LocalWorld(2)
        world.close()
        val closed = shouldThrow<CommunicatorAbortedException> { world.communicator(0).allReduce(Tensor.of(floatArrayOf(1f))) }
        closed.flightRecorderDump.shouldNotBeNull() shouldContain "allReduce"
        LocalWorld(2).use { w ->
            w.communicator(1).close()
            val peerClosed = shouldThrow<CommunicatorAbortedException> { w.communicator(0).barrier() }
            peerClosed.flightRecorderDump.shouldNotBeNull() shouldContain "barrier"
            val recv = shouldThrow<CommunicatorAbortedException> { w.communicator(0).recv(Tensor.zeros(DType.Int32, 1), 1) }
            recv.flightRecorderDump.shouldNotBeNull() shouldContain "recv"
        }
        val e: CommunicationException = closed
        e.operation shouldBe "allReduce"
    }
})
