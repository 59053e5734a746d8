package dev.tpcomm.coroutines.async

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.DeviceMesh
import dev.tpcomm.coroutines.LocalWorld
import dev.tpcomm.coroutines.allReduceAsync
import dev.tpcomm.coroutines.allReduceCoalesced
import dev.tpcomm.coroutines.allReducePipelined
import dev.tpcomm.coroutines.awaitAll
import dev.tpcomm.coroutines.overlap
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.types.shouldBeInstanceOf
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.delay
import kotlinx.coroutines.supervisorScope
import kotlinx.coroutines.withContext
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/** The helpers on the real in-process backend (the other specs use a fake world to isolate them). */
class LocalBackendAsyncSpec : FunSpec({
    test("async handles, overlap, pipeline and fusion on a local world of 4 ranks") {
        val out = withContext(Dispatchers.Default) {
            runLocalWorld(4) { comm ->
                val r = comm.rank.toFloat()
                val h1 = allReduceAsync(comm, Tensor.of(floatArrayOf(r)))
                val h2 = allReduceAsync(comm, Tensor.of(floatArrayOf(r)), ReduceOp.Max)
                val (gathered, local) = overlap({ comm.allGather(Tensor.of(floatArrayOf(r))) }, { r * 2 })
                val chunks = List(3) { Tensor.zeros(DType.Float32, 1024) }
                comm.allReducePipelined(chunks) { i, c -> c.fill(i + 1.0) }
                val small = List(10) { Tensor.of(floatArrayOf(r, 1f)) }
                comm.allReduceCoalesced(small + Tensor.of(intArrayOf(comm.rank)), thresholdBytes = 24)
                listOf(
                    h1.await().toFloatArray()[0], h2.await().toFloatArray()[0], gathered.toFloatArray().sum(), local,
                    chunks.map { it.getFloat(1023) }.sum(), small.map { it.toFloatArray().sum() }.sum(),
                )
            }
        }
        for ((rank, o) in out.withIndex()) o shouldBe listOf(6f, 3f, 6f, rank * 2f, 4f * (1 + 2 + 3), 10 * (6f + 4f))
    }

    test("a DeviceMesh of 2 x 2 on the local backend") {
        val out = withContext(Dispatchers.Default) {
            runLocalWorld(4) { comm ->
                DeviceMesh(comm, listOf(2, 2), listOf("dp", "tp")).use { mesh ->
                    val tp = mesh["tp"].allGather(Tensor.of(intArrayOf(comm.rank))).toIntArray().toList()
                    val dp = mesh["dp"].allGather(Tensor.of(intArrayOf(comm.rank))).toIntArray().toList()
                    tp to dp
                }
            }
        }
        out shouldBe listOf(listOf(0, 1) to listOf(0, 2), listOf(0, 1) to listOf(1, 3), listOf(2, 3) to listOf(0, 2), listOf(2, 3) to listOf(1, 3))
    }

    test("awaitAll's deadline aborts the local world: the late rank fails instead of hanging") {
        LocalWorld(2).use { world ->
            supervisorScope {
                val c0 = world.communicator(0)
                val h = allReduceAsync(c0, Tensor.of(floatArrayOf(1f)))
                val e = shouldThrow<CommunicationTimeoutException> { listOf(h).awaitAll(100.milliseconds, c0) }
                e.backend shouldBe "local"
                h.isCancelled shouldBe true
                shouldThrow<CommunicationException> { world.communicator(1).allReduce(Tensor.of(floatArrayOf(1f))) }
            }
        }
    }

    test("cancelling an in-flight handle aborts the local world for every rank") {
        LocalWorld(2).use { world ->
            supervisorScope {
                val h = allReduceAsync(world.communicator(0), Tensor.of(floatArrayOf(1f)))
                h.cancel()
                shouldThrow<CancellationException> { h.await() }
                delay(500) // the local backend notices a cancelled waiter within one watchdog period
                shouldThrow<CommunicationException> { world.communicator(1).allReduce(Tensor.of(floatArrayOf(1f))) }
            }
        }
    }

    test("the backend's own deadline reaches await as CommunicationTimeoutException") {
        LocalWorld(2, CommConfig(timeout = 200.milliseconds)).use { world ->
            supervisorScope {
                val h = async { world.communicator(1).barrier() }
                shouldThrow<CommunicationException> { listOf(h).awaitAll(10.seconds) }.shouldBeInstanceOf<CommunicationTimeoutException>()
            }
        }
    }
})
