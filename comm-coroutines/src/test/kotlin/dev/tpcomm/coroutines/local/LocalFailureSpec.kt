package dev.tpcomm.coroutines.local

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.LocalWorld
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainExactly
import io.kotest.matchers.nulls.shouldNotBeNull
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.types.shouldBeInstanceOf
import io.kotest.matchers.types.shouldBeSameInstanceAs
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.TimeoutCancellationException
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.cancelAndJoin
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.withContext
import kotlinx.coroutines.withTimeout
import kotlinx.coroutines.yield
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

class LocalFailureSpec : FunSpec({
    val short = CommConfig(timeout = 300.milliseconds)

    test("a rank that never arrives: the others time out with the flight recorder, later calls are aborted") {
        LocalWorld(3, short).use { world ->
            val errors = coroutineScope {
                (0 until 2).map { r ->
                    async(Dispatchers.Default) {
                        runCatching { world.communicator(r).allReduce(Tensor.of(floatArrayOf(1f))) }.exceptionOrNull()
                    }
                }.awaitAll()
            }
            errors.forEachIndexed { r, e ->
                val t = e.shouldBeInstanceOf<CommunicationTimeoutException>()
                t.rank shouldBe r
                t.backend shouldBe "local"
                t.operation shouldBe "allReduce"
                t.sequenceNumber shouldBe 1L
                t.message shouldContain "[2]"
                t.flightRecorderDump.shouldNotBeNull() shouldContain "\"allReduce\""
            }
            val later = shouldThrow<CommunicatorAbortedException> { world.communicator(2).allReduce(Tensor.of(floatArrayOf(1f))) }
            later.cause.shouldBeInstanceOf<CommunicationTimeoutException>()
            shouldThrow<CommunicatorAbortedException> { world.communicator(0).barrier() }
        }
    }

    test("mismatched collectives fail on every rank naming the ranks and fields") {
        val errors = runCatching {
            runLocalWorld(3) { comm ->
                runCatching {
                    when (comm.rank) {
                        0 -> comm.allReduce(Tensor.zeros(DType.Float32, 4))
                        1 -> comm.allReduce(Tensor.zeros(DType.Float32, 5), ReduceOp.Max)
                        else -> comm.broadcast(Tensor.zeros(DType.Float32, 4), 0)
                    }
                }.exceptionOrNull()
            }
        }.getOrThrow()
        for ((r, e) in errors.withIndex()) {
            val m = e.shouldBeInstanceOf<CollectiveMismatchException>()
            m.rank shouldBe r
            m.ranks shouldContainExactly listOf(1, 2)
            m.fields shouldContainExactly listOf("operation", "op", "shape")
            m.message shouldContain "broadcast"
        }
    }

    test("group with different member lists is a mismatch naming the field ranks") {
        val errors = runLocalWorld(3) { comm ->
            runCatching { comm.group(if (comm.rank == 2) listOf(0, 2) else listOf(0, 1)) }.exceptionOrNull()
        }
        errors.forEach {
            val m = it.shouldBeInstanceOf<CollectiveMismatchException>()
            m.ranks shouldContainExactly listOf(2)
            m.fields shouldContainExactly listOf("ranks")
        }
    }

    test("the local backend is registered for ServiceLoader with priority 10") {
        val local = dev.tpcomm.Comm.backends().single { it.name == "local" }
        local.priority shouldBe 10
        local.isAvailable() shouldBe true
    }

    test("an exception in one rank aborts the world and is rethrown by runLocalWorld") {
        val boom = IllegalStateException("boom")
        val thrown = shouldThrow<IllegalStateException> {
            runLocalWorld(3, CommConfig(timeout = 30.seconds)) { comm ->
                if (comm.rank == 1) {
                    delay(50)
                    throw boom
                }
                comm.allReduce(Tensor.of(floatArrayOf(1f)))
            }
        }
        // the original, or a copy of it made by coroutines' stack-trace recovery with the original as cause
        (thrown === boom || thrown.cause === boom) shouldBe true
        boom.suppressed.size shouldBe 2
        boom.suppressed.forEach { it.shouldBeInstanceOf<CommunicatorAbortedException>().cause shouldBeSameInstanceAs boom }
    }

    test("cancelling an in-flight collective aborts the world; the cancelled call throws CancellationException") {
        LocalWorld(2, CommConfig(timeout = 30.seconds)).use { world ->
            withContext(Dispatchers.Default) {
                var cancelled: Throwable? = null
                val job = launch {
                    try {
                        world.communicator(0).allReduce(Tensor.of(floatArrayOf(1f)))
                    } catch (t: Throwable) {
                        cancelled = t; throw t
                    }
                }
                delay(50)
                job.cancelAndJoin()
                cancelled.shouldBeInstanceOf<CancellationException>()
                val e = shouldThrow<CommunicatorAbortedException> { world.communicator(1).allReduce(Tensor.of(floatArrayOf(1f))) }
                e.message shouldContain "cancelled"
            }
        }
        // withTimeout around a call: the caller sees CommunicationTimeoutException (issue 10), the world aborts
        LocalWorld(2, CommConfig(timeout = 30.seconds)).use { world ->
            shouldThrow<CommunicationTimeoutException> { withTimeout(100) { world.communicator(0).barrier() } }
                .cause.shouldBeInstanceOf<TimeoutCancellationException>()
            world.isAborted shouldBe true
        }
    }

    test("calls after close throw CommunicatorAbortedException; a closed peer fails collectives fast") {
        val world = LocalWorld(2)
        world.close()
        shouldThrow<CommunicatorAbortedException> { world.communicator(0).allReduce(Tensor.of(floatArrayOf(1f))) }
        shouldThrow<CommunicatorAbortedException> { world.communicator(1).send(Tensor.of(floatArrayOf(1f)), 0) }
        LocalWorld(2).use { w ->
            w.communicator(1).close()
            shouldThrow<CommunicatorAbortedException> { w.communicator(0).barrier() }.message shouldContain "closed"
        }
    }

    test("a tensor closed while its collective is in flight: the free is deferred and the collective completes on every rank") {
        LocalWorld(2, CommConfig(timeout = 30.seconds)).use { world ->
            withContext(Dispatchers.Default) {
                val t0 = Tensor.of(floatArrayOf(1f))
                val first = async { runCatching { world.communicator(0).allReduce(t0) }.exceptionOrNull() }
                delay(50) // rank 0 is waiting in the collective
                t0.close()
                val t1 = Tensor.of(floatArrayOf(2f))
                val second = runCatching { world.communicator(1).allReduce(t1) }.exceptionOrNull()
                first.await() shouldBe null
                second shouldBe null
                t1.toFloatArray()[0] shouldBe 3f
                world.isAborted shouldBe false
                t0.isClosed shouldBe true
            }
        }
    }

    test("receiving from a rank that closed its communicator fails at once") {
        LocalWorld(2).use { world ->
            world.communicator(1).send(Tensor.of(intArrayOf(7)), 0)
            world.communicator(1).close()
            val t = Tensor.zeros(DType.Int32, 1)
            world.communicator(0).recv(t, 1).source shouldBe 1 // queued before the close: still delivered
            t.getLong(0) shouldBe 7
            shouldThrow<CommunicatorAbortedException> { world.communicator(0).recv(t, 1) }.message shouldContain "closed"
        }
    }

    test("bad arguments fail before any data moves, buffers unchanged, communicator still usable") {
        runLocalWorld(2) { comm ->
            val t = Tensor.of(floatArrayOf(1f, 2f))
            shouldThrow<IllegalArgumentException> { comm.broadcast(t, 2) }.message shouldContain "root 2"
            shouldThrow<IllegalArgumentException> { comm.allReduce(t, ReduceOp.BitwiseAnd) }
            shouldThrow<IllegalArgumentException> { comm.reduceScatter(Tensor.zeros(DType.Float32, 3)) }
            shouldThrow<IllegalArgumentException> { comm.allGather(t, 1) }
            shouldThrow<IllegalArgumentException> { comm.allGatherInto(Tensor.zeros(DType.Float32, 3), t) }
            // Only the root must pass an input; a null there fails on the root alone, before arrival.
            if (comm.rank == 0) shouldThrow<IllegalArgumentException> { comm.scatter(Tensor.zeros(DType.Float32, 1), null, 0) }
            t.toFloatArray().toList() shouldBe listOf(1f, 2f)
            comm.allReduce(t).toFloatArray().toList() shouldBe listOf(2f, 4f)
        }.size shouldBe 2
    }
})
