@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import dev.tpcomm.gpu.sim.SimulatedWorld
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
import java.nio.file.Files
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/** The engine on the simulated platform, one device per rank: exact results of the device-side paths, p2p, split, faults. */
class NcclEngineSimTest : FunSpec({
    val config = CommConfig(timeout = 10.seconds)

    fun floats(rows: Int, cols: Int, f: (Int, Int) -> Float) = Tensor.of(FloatArray(rows * cols) { f(it / cols, it % cols) }, rows, cols)

    test("collectives along dim 1 rearrange on the device with exact results (world of 3, one device per rank)") {
        val platform = SimulatedGpuPlatform()
        val world = SimulatedWorld(platform)
        world.run(3, config) { c ->
            val r = c.rank
            val dev = Device.Cuda(r)
            c.device shouldBe dev
            val input = floats(2, 2) { i, j -> (100 * r + 10 * i + j).toFloat() }
            val gathered = platform.download(c.allGather(platform.upload(input, dev), 1))
            gathered.toFloatArray().toList() shouldBe Tensor.concat((0 until 3).map { q -> floats(2, 2) { i, j -> (100 * q + 10 * i + j).toFloat() } }, 1).toFloatArray().toList()

            val big = floats(2, 6) { i, j -> (r + 1) * (10 * i + j).toFloat() }
            val rs = platform.download(c.reduceScatter(platform.upload(big, dev), ReduceOp.Sum, 1))
            rs.shape shouldBe listOf(2, 2)
            rs.toFloatArray().toList() shouldBe floats(2, 2) { i, j -> 6f * (10 * i + 2 * r + j) }.toFloatArray().toList()

            val a2a = platform.download(c.allToAll(platform.upload(floats(2, 3) { i, j -> (100 * r + 10 * i + j).toFloat() }, dev), 1))
            a2a.toFloatArray().toList() shouldBe floats(2, 3) { i, j -> (100 * j + 10 * i + r).toFloat() }.toFloatArray().toList()

            val g = c.gather(platform.upload(input, dev), root = 2, dim = 1)
            if (r == 2) platform.download(g!!).toFloatArray().toList() shouldBe gathered.toFloatArray().toList() else g shouldBe null

            val out = platform.upload(Tensor.zeros(DType.Float32, 2, 2), dev)
            c.scatter(out, if (r == 0) platform.upload(floats(2, 6) { i, j -> (10 * i + j).toFloat() }, dev) else null, 0, 1)
            platform.download(out).toFloatArray().toList() shouldBe floats(2, 2) { i, j -> (10 * i + 2 * r + j).toFloat() }.toFloatArray().toList()

            val ints = platform.upload(Tensor.of(intArrayOf(r, -r, 7)), dev)
            c.allReduce(ints, ReduceOp.Max)
            platform.download(ints).toIntArray().toList() shouldBe listOf(2, 0, 7)
            c.barrier()
        }
    }

    test("several calls in flight at once complete in issue order") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(2, config) { c ->
            val dev = Device.Cuda(c.rank)
            val t = platform.upload(Tensor.of(floatArrayOf(1f)), dev)
            coroutineScope {
                val calls = (1..20).map { k ->
                    async(start = CoroutineStart.UNDISPATCHED) { if (k % 2 == 0) c.allReduce(t) else c.broadcast(t, k % 2) }
                }
                calls.awaitAll()
            }
            platform.download(t).toFloatArray()[0] shouldBe 1024f
        }
    }

    test("point-to-point ring with tag 0, and recv reports the source and byte size") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(3, config) { c ->
            val n = c.worldSize
            val dev = Device.Cuda(c.rank)
            val mine = platform.upload(Tensor.of(longArrayOf(c.rank.toLong(), 42)), dev)
            val buf = platform.upload(Tensor.zeros(DType.Int64, 2), dev)
            coroutineScope {
                val sent = async(start = CoroutineStart.UNDISPATCHED) { c.send(mine, (c.rank + 1) % n) }
                val info = c.recv(buf, (c.rank + n - 1) % n)
                info.source shouldBe (c.rank + n - 1) % n
                info.byteSize shouldBe 16
                sent.await()
            }
            platform.download(buf).toLongArray().toList() shouldBe listOf(((c.rank + n - 1) % n).toLong(), 42L)
        }
    }

    test("split and group through ncclCommSplit: members only, ordered by key; the parent stays usable") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(4, config) { c ->
            val dev = Device.Cuda(c.rank)
            val sub = c.split(c.rank % 2, key = -c.rank)!!
            sub.worldSize shouldBe 2
            sub.rank shouldBe (if (c.rank < 2) 1 else 0)
            sub.device shouldBe dev
            val t = platform.upload(Tensor.of(longArrayOf(1L shl c.rank)), dev)
            sub.allReduce(t)
            platform.download(t).toLongArray()[0] shouldBe (if (c.rank % 2 == 0) 5L else 10L)
            val g = c.group(listOf(3, 1))
            if (c.rank == 3 || c.rank == 1) {
                g!!.rank shouldBe (if (c.rank == 3) 0 else 1)
                g.barrier()
                g.close()
            } else {
                g shouldBe null
            }
            c.split(null) shouldBe null
            sub.close()
            val x = platform.upload(Tensor.of(floatArrayOf(1f)), dev)
            c.allReduce(x)
            platform.download(x).toFloatArray()[0] shouldBe 4f
        }
    }

    test("object collectives are staged through device memory") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(3, config) { c ->
            c.allGatherObject("rank-${c.rank}", kotlinx.serialization.serializer<String>()) shouldBe listOf("rank-0", "rank-1", "rank-2")
            c.broadcastObject(if (c.rank == 1) listOf(1, 2, 3) else null, 1, kotlinx.serialization.serializer<List<Int>>()) shouldBe listOf(1, 2, 3)
        }
    }

    test("an injected asynchronous error fails the pending call with NcclException and aborts") {
        val platform = SimulatedGpuPlatform()
        val comms = SimulatedWorld(platform).connect(CommConfig(worldSize = 2, timeout = 10.seconds))
        val t = platform.upload(Tensor.of(floatArrayOf(1f)), Device.Cuda(0))
        val pending = coroutineScope {
            val p = async(start = CoroutineStart.UNDISPATCHED) { runCatching { comms[0].allReduce(t) } }
            Thread.sleep(50)
            platform.injectAsyncError(0, NcclResult.SYSTEM_ERROR)
            p.await()
        }
        val e = pending.exceptionOrNull()
        e.shouldBeInstanceOf<NcclException>()
        e.result shouldBe NcclResult.SYSTEM_ERROR
        comms[0].isAborted shouldBe true
        comms.forEach { it.close() }
    }

    test("a stalled device times out; with peer-failure detection the others see ncclRemoteError") {
        val platform = SimulatedGpuPlatform(detectPeerFailure = true)
        val comms = SimulatedWorld(platform).connect(CommConfig(worldSize = 2, timeout = 400.milliseconds))
        platform.stall(0, true)
        val results = coroutineScope {
            comms.map { c -> async(Dispatchers.Default) { runCatching { c.allReduce(platform.upload(Tensor.of(floatArrayOf(1f)), c.device)) } } }.awaitAll()
        }
        platform.stall(0, false)
        val errors = results.map { it.exceptionOrNull() }
        (errors.any { it is CommunicationTimeoutException }) shouldBe true
        errors.forEach { (it is CommunicationTimeoutException || (it is NcclException && it.result == NcclResult.REMOTE_ERROR)) shouldBe true }
        shouldThrow<CommunicatorAbortedException> { comms[1].barrier() }
        comms.forEach { it.close() }
    }

    test("two ranks on one device are refused as NCCL does (ncclInvalidUsage at init)") {
        val platform = SimulatedGpuPlatform()
        val e = shouldThrow<NcclException> { SimulatedWorld(platform, "nccl") { Device.Cuda(0) }.connect(CommConfig(worldSize = 2, timeout = 2.seconds)) }
        e.result shouldBe NcclResult.INVALID_USAGE
    }

    test("a world bootstrapped through the file rendezvous") {
        val platform = SimulatedGpuPlatform()
        val path = Files.createTempDirectory("tpcomm-sim-rdv").resolve("rdv")
        val base = CommConfig(worldSize = 2, timeout = 10.seconds, rendezvous = path.toUri().toString())
        val comms = coroutineScope {
            (0 until 2).map { r ->
                async(Dispatchers.Default) {
                    val cfg = base.copy(rank = r, localRank = r)
                    val (channel, _) = BootstrapChannel.fromConfig(cfg)
                    NcclConnector.connect(platform.api, platform.runtime, Device.Cuda(r), cfg, channel, "nccl")
                }
            }.awaitAll()
        }
        val sums = coroutineScope {
            comms.map { c ->
                async(Dispatchers.Default) {
                    val t = platform.upload(Tensor.of(doubleArrayOf(c.rank + 0.5)), c.device)
                    c.allReduce(t)
                    platform.download(t).toDoubleArray()[0]
                }
            }.awaitAll()
        }
        sums shouldBe listOf(2.0, 2.0)
        comms.forEach { it.close() }
        platform.close()
    }

    test("temporary device buffers are freed after each call") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(2, config) { c ->
            val dev = Device.Cuda(c.rank)
            val input = platform.upload(floats(2, 2) { i, j -> (i + j).toFloat() }, dev)
            val out = platform.upload(Tensor.zeros(DType.Float32, 2, 4), dev)
            c.barrier() // allocates the barrier's scratch buffer on both ranks
            // The count is platform-wide: read it only while both ranks sit between two barriers.
            val before = platform.liveAllocations
            c.barrier()
            repeat(5) { c.allGatherInto(out, input, 1) }
            c.barrier()
            platform.liveAllocations shouldBe before
            c.barrier()
            java.lang.ref.Reference.reachabilityFence(input) // else their cleaners may free them mid-count
            java.lang.ref.Reference.reachabilityFence(out)
        }
    }
})
