package dev.tpcomm.coroutines.local

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.LocalWorld
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.types.shouldBeInstanceOf
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.withContext
import kotlinx.coroutines.withTimeout
import kotlin.time.Duration.Companion.milliseconds

class LocalOrderingSpec : FunSpec({
    test("async(UNDISPATCHED) collectives issue in program order, also beyond the slot ring") {
        val count = LocalGroup.RING + 44
        val results = withContext(Dispatchers.Default) {
            runLocalWorld(3) { comm ->
                if (comm.rank == 2) delay(20) // the others run far ahead
                coroutineScope {
                    // sizes differ per call, so a reordering would surface as a mismatch
                    val calls = (0 until count).map { k ->
                        val t = Tensor.of(FloatArray(1 + k % 5) { (k * 100 + comm.rank).toFloat() })
                        async(start = CoroutineStart.UNDISPATCHED) { comm.allReduce(t).getFloat(0) }
                    }
                    calls.awaitAll()
                }
            }
        }
        for (r in 0 until 3) results[r] shouldBe List(count) { k -> (3 * k * 100 + 3).toFloat() }
    }

    test("calls from several threads of one rank keep their call order") {
        withContext(Dispatchers.Default) {
            runLocalWorld(2) { comm ->
                // each rank issues in a loop, launching each call undispatched on the shared pool
                coroutineScope {
                    repeat(200) { k ->
                        launch(start = CoroutineStart.UNDISPATCHED) {
                            val t = Tensor.of(intArrayOf(k))
                            comm.allReduce(t).getLong(0) shouldBe 2L * k
                        }
                    }
                }
            }
        }
    }

    test("send and recv: tags, FIFO per pair and tag, ANY_SOURCE, probe, size mismatch") {
        runLocalWorld(3) { comm ->
            when (comm.rank) {
                0 -> {
                    comm.send(Tensor.of(intArrayOf(1)), 2, tag = 7)
                    comm.send(Tensor.of(intArrayOf(2)), 2, tag = 7)
                    comm.send(Tensor.of(intArrayOf(3, 3)), 2, tag = 9)
                }
                1 -> {
                    delay(20)
                    comm.send(Tensor.of(longArrayOf(42)), 2, tag = 1)
                }
                else -> {
                    val info = comm.probe(Communicator.ANY_SOURCE, 9)
                    info.source shouldBe 0; info.byteSize shouldBe 8
                    // As on MPI: a plain CommunicationException (not a timeout or an abort) saying both sizes; the message stays queued.
                    val wrong = shouldThrow<CommunicationException> { comm.recv(Tensor.zeros(DType.Int32, 1), 0, 9) }
                    wrong::class shouldBe CommunicationException::class
                    wrong.reason shouldContain "has 8 bytes but the receiving tensor (Int32[1]) has 4 bytes"
                    comm.recv(Tensor.zeros(DType.Int32, 2), 0, 9).tag shouldBe 9
                    val a = Tensor.zeros(DType.Int32, 1)
                    comm.recv(a, 0, 7); a.getLong(0) shouldBe 1
                    comm.recv(a, 0, Communicator.ANY_TAG); a.getLong(0) shouldBe 2
                    val b = Tensor.zeros(DType.Int64, 1)
                    val any = comm.recv(b, Communicator.ANY_SOURCE, Communicator.ANY_TAG) // posted before rank 1 sends
                    any.source shouldBe 1; any.tag shouldBe 1; b.getLong(0) shouldBe 42
                }
            }
            comm.barrier()
        }
    }

    test("a receive that is never matched times out and aborts the world") {
        LocalWorld(2, CommConfig(timeout = 200.milliseconds)).use { world ->
            val e = shouldThrow<CommunicationTimeoutException> { world.communicator(0).recv(Tensor.zeros(DType.Int32, 1), 1, 3) }
            e.operation shouldBe "recv"
            e.message shouldContain "rank 1"
            world.isAborted shouldBe true
        }
        // a cancelled receive withdraws itself without aborting
        LocalWorld(2).use { world ->
            runCatching { withTimeout(50) { world.communicator(0).recv(Tensor.zeros(DType.Int32, 1), 1) } }
            world.isAborted shouldBe false
            world.communicator(1).send(Tensor.of(intArrayOf(5)), 0)
            val t = Tensor.zeros(DType.Int32, 1)
            world.communicator(0).recv(t, 1).source shouldBe 1
            t.getLong(0) shouldBe 5
        }
    }

    test("nested splits have their own sequence numbers") {
        runLocalWorld(8) { comm ->
            val half = comm.split(comm.rank / 4)!!
            val quarter = half.split(half.rank / 2)!!
            quarter.worldSize shouldBe 2
            val t = Tensor.of(intArrayOf(comm.rank))
            quarter.allReduce(t)
            half.barrier()
            t.getLong(0) shouldBe (comm.rank / 2 * 2) * 2L + 1
            comm.split(if (comm.rank == 0) null else 1) ?.worldSize
        }.let { sizes -> sizes shouldBe listOf(null) + List(7) { 7 } }
    }
})
