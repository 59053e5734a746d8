@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.gpu

import dev.tpcomm.PointToPoint
import dev.tpcomm.BackendUnavailableException
import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import dev.tpcomm.gpu.sim.SimulatedWorld
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldBeEmpty
import io.kotest.matchers.longs.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.shouldNotBe
import io.kotest.matchers.string.shouldContain
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import kotlinx.coroutines.supervisorScope
import kotlinx.coroutines.withTimeout
import kotlin.time.Duration.Companion.seconds

/**
 * Issue 12's findings, each as a user's program on the simulated platform that behaves like NCCL
 * and CUDA (see the KDoc of SimulatedNccl and SimulatedRuntime for the sources each behaviour
 * follows). Real threads, real timeouts; every test also fails on recorded misuse.
 */
class GpuDefectsSimTest : FunSpec({
    fun ints(vararg v: Int) = Tensor.of(v)

    test("1. a non-blocking split yields the child the library writes later, after the parent's work drained") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(2, CommConfig(timeout = 10.seconds)) { c ->
            val dev = c.device
            val t = platform.upload(ints(c.rank + 1), dev)
            coroutineScope {
                val inFlight = async(start = CoroutineStart.UNDISPATCHED) { c.allReduce(t) }
                val child = c.split(color = 0, key = c.rank)
                child shouldNotBe null
                inFlight.await()
                val s = platform.upload(ints(10 * (c.rank + 1)), dev)
                platform.download(child!!.allReduce(s)).toIntArray().toList() shouldBe listOf(30)
                child.close()
            }
            platform.download(t).toIntArray().toList() shouldBe listOf(3)
        }
        platform.assertNoMisuse()
    }

    test("2. a library older than NCCL 2.18 is refused at load with BackendUnavailableException") {
        val platform = SimulatedGpuPlatform(version = 21700)
        val e = shouldThrow<BackendUnavailableException> { SimulatedWorld(platform).connect(CommConfig(worldSize = 1, timeout = 5.seconds)) }
        e.message shouldContain "2.17.0"
        e.message shouldContain "2.18"
    }

    test("2b. a blocking communicator (ncclConfig_t.blocking = 1) is refused before anything is issued, not left to hang past the deadline") {
        // A rank whose peer never comes: with blocking = 1, ncclCommInitRankConfig itself blocks the
        // native thread until every rank joined (NVIDIA/nccl src/group.cc:40-44: outside a group
        // ncclAsyncLaunch runs the init job on the caller's thread), so no deadline can end it.
        val platform = SimulatedGpuPlatform()
        val start = System.nanoTime()
        val e = shouldThrow<IllegalArgumentException> {
            withTimeout(5.seconds) {
                NcclConnector.connect(
                    platform.api, platform.runtime, Device.Cuda(0), CommConfig(worldSize = 2, rank = 0, timeout = 1.seconds),
                    { _, id -> id!! }, "nccl", commConfig = NcclCommConfig(blocking = true),
                )
            }
        }
        (System.nanoTime() - start) / 1_000_000 shouldBeLessThan 1_000
        e.message shouldContain "blocking"
        e.message shouldContain "deadline"
    }

    test("4. a peer that never arrives ends a checkConsistency collective with CommunicationTimeoutException at the deadline") {
        val platform = SimulatedGpuPlatform()
        val comms = SimulatedWorld(platform).connect(CommConfig(worldSize = 2, timeout = 1.seconds, checkConsistency = true))
        try {
            val t = platform.upload(ints(1, 2), comms[0].device)
            val start = System.nanoTime()
            // Rank 1 never calls: the signature all-gather waits; a pageable device-to-host copy would block the native thread.
            shouldThrow<CommunicationTimeoutException> { withTimeout(8.seconds) { comms[0].allReduce(t) } }
            (System.nanoTime() - start) / 1_000_000 shouldBeLessThan 4_000
            platform.blockingPageableCopies shouldBe 0
        } finally {
            comms.forEach { it.close() }
        }
    }

    test("4b. temporaries are freed without blocking the native thread while later work on the stream hangs") {
        val platform = SimulatedGpuPlatform()
        val comms = SimulatedWorld(platform).connect(CommConfig(worldSize = 2, timeout = 1.seconds))
        try {
            val start = System.nanoTime()
            val result = coroutineScope {
                // Both ranks: an all-gather along dim 1 (a temporary buffer); rank 0 queues an all-reduce
                // rank 1 never joins behind it, so the all-gather's temporary is freed while that hangs.
                val g1 = async { comms[1].allGather(platform.upload(Tensor.zeros(DType.Float32, 2, 2), comms[1].device), 1) }
                val g0 = async(start = CoroutineStart.UNDISPATCHED) { comms[0].allGather(platform.upload(Tensor.zeros(DType.Float32, 2, 2), comms[0].device), 1) }
                val hung = async(start = CoroutineStart.UNDISPATCHED) {
                    runCatching { withTimeout(8.seconds) { comms[0].allReduce(platform.upload(ints(1), comms[0].device)) } }
                }
                g1.await()
                runCatching { g0.await() }
                hung.await()
            }
            (result.exceptionOrNull() is CommunicationTimeoutException) shouldBe true
            (System.nanoTime() - start) / 1_000_000 shouldBeLessThan 4_000
        } finally {
            comms.forEach { it.close() }
        }
    }

    test("5. a ring exchange of messages larger than the connection buffer completes (sends and receives grouped)") {
        val platform = SimulatedGpuPlatform(p2pBufferBytes = 1024)
        SimulatedWorld(platform).run(3, CommConfig(timeout = 3.seconds)) { c ->
            val n = c.worldSize
            val next = (c.rank + 1) % n
            val prev = (c.rank + n - 1) % n
            val out = platform.upload(Tensor.of(IntArray(4096) { c.rank * 10_000 + it }), c.device)
            val buf = platform.upload(Tensor.zeros(DType.Int32, 4096), c.device)
            c.sendRecv(out, next, buf, prev)
            platform.download(buf).toIntArray()[5] shouldBe prev * 10_000 + 5
            // The same exchange as two calls in flight at once (the testkit's ring pattern) is grouped too.
            val buf2 = platform.upload(Tensor.zeros(DType.Int32, 4096), c.device)
            coroutineScope {
                val sent = async(start = CoroutineStart.UNDISPATCHED) { c.send(out, next) }
                c.recv(buf2, prev)
                sent.await()
            }
            platform.download(buf2).toIntArray()[7] shouldBe prev * 10_000 + 7
        }
        platform.assertNoMisuse()
    }

    test("5b. a batch of sends and receives to both neighbours is one group and completes, whatever the timing") {
        val platform = SimulatedGpuPlatform(p2pBufferBytes = 1024)
        SimulatedWorld(platform).run(3, CommConfig(timeout = 3.seconds)) { c ->
            val n = c.worldSize
            val next = (c.rank + 1) % n
            val prev = (c.rank + n - 1) % n
            val out = platform.upload(Tensor.of(IntArray(4096) { c.rank * 10_000 + it }), c.device)
            val fromPrev = platform.upload(Tensor.zeros(DType.Int32, 4096), c.device)
            val fromNext = platform.upload(Tensor.zeros(DType.Int32, 4096), c.device)
            if (c.rank == 1) delay(50) // a late rank: the batch does not depend on when its peers call
            c.sendRecv(
                listOf(
                    PointToPoint.send(out, next), PointToPoint.send(out, prev),
                    PointToPoint.recv(fromPrev, prev), PointToPoint.recv(fromNext, next),
                ),
            )
            platform.download(fromPrev).toIntArray()[9] shouldBe prev * 10_000 + 9
            platform.download(fromNext).toIntArray()[11] shouldBe next * 10_000 + 11
        }
        platform.assertNoMisuse()
    }

    test("5c. separate send and recv issued further apart than the grouping window end in a named exception at the deadline on every rank, not a hang") {
        val platform = SimulatedGpuPlatform(p2pBufferBytes = 1024)
        val comms = SimulatedWorld(platform).connect(CommConfig(worldSize = 3, timeout = 2.seconds))
        try {
            val start = System.nanoTime()
            val outcomes = supervisorScope {
                comms.map { c ->
                    async(Dispatchers.Default) {
                        val n = c.worldSize
                        val out = platform.upload(Tensor.of(IntArray(4096) { it }), c.device)
                        val buf = platform.upload(Tensor.zeros(DType.Int32, 4096), c.device)
                        runCatching {
                            coroutineScope {
                                val sent = async(start = CoroutineStart.UNDISPATCHED) { c.send(out, (c.rank + 1) % n) }
                                delay(50) // longer than the window: the send's group was issued alone
                                c.recv(buf, (c.rank + n - 1) % n)
                                sent.await()
                            }
                        }.exceptionOrNull()
                    }
                }.awaitAll()
            }
            val ms = (System.nanoTime() - start) / 1_000_000
            outcomes.forEach { e -> (e is CommunicationException) shouldBe true }
            outcomes.any { it is CommunicationTimeoutException } shouldBe true
            ms shouldBeLessThan 6_000
        } finally {
            comms.forEach { it.close() }
        }
    }

    test("6. device memory freed from the Cleaner thread is freed with its own device current") {
        val platform = SimulatedGpuPlatform()
        val copies = DeviceCopies(platform.runtime, Device.Cuda(1))
        val before = platform.liveAllocations
        run { copies.upload(ints(1, 2, 3)) }
        val deadline = System.nanoTime() + 10_000_000_000L
        while (platform.liveAllocations > before && System.nanoTime() < deadline) {
            System.gc()
            delay(20)
        }
        platform.liveAllocations shouldBe before
        platform.implicitDeviceCalls.filter { "free" in it }.shouldBeEmpty()
        platform.assertNoMisuse()
    }

    test("7. a collective is ordered after the producer stream's work on its input") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(2, CommConfig(timeout = 10.seconds)) { c ->
            val rt = platform.runtime
            val t = platform.upload(ints(0, 0), c.device)
            val s = LongArray(1)
            rt.setDevice(c.rank) shouldBe 0
            rt.streamCreateNonBlocking(s) shouldBe 0
            val producer = s[0]
            // A slow kernel on the producer stream, then the write of the input behind it.
            val gate = platform.holdStream(producer)
            val src = LongArray(1)
            rt.hostAlloc(src, 8)
            java.lang.foreign.MemorySegment.ofAddress(src[0]).reinterpret(8).copyFrom(java.lang.foreign.MemorySegment.ofArray(intArrayOf(c.rank + 1, 5)))
            rt.memcpyAsync(t.address, src[0], 8, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, producer) shouldBe 0
            c.producerStream = producer
            coroutineScope {
                val r = async { c.allReduce(t) }
                delay(100)
                gate.close()
                r.await()
            }
            platform.download(t).toIntArray().toList() shouldBe listOf(3, 10)
        }
        platform.assertNoMisuse()
    }

    test("8. close finalizes each communicator before destroying it") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(2, CommConfig(timeout = 10.seconds)) { c ->
            platform.download(c.allReduce(platform.upload(ints(c.rank), c.device))).toIntArray().toList() shouldBe listOf(1)
        }
        platform.assertNoMisuse()
    }

    test("9. a failure inside a group ends the group before the communicator is aborted") {
        val platform = SimulatedGpuPlatform()
        val comms = SimulatedWorld(platform).connect(CommConfig(worldSize = 2, timeout = 2.seconds))
        try {
            // Memory the library refuses (never allocated on the device): the root's grouped send fails.
            val bogus = Tensor.wrapDevice(Device.Cuda(0), 0x7E00_7000_0000_0000L, DType.Int32, 4)
            val out = platform.upload(Tensor.zeros(DType.Int32, 2), Device.Cuda(0))
            shouldThrow<dev.tpcomm.CommunicationException> { comms[0].scatter(out, bogus, root = 0) }
            comms[0].isAborted shouldBe true
        } finally {
            comms.forEach { it.close() }
        }
        platform.misuse.filter { "open group" in it }.shouldBeEmpty()
    }

    test("10. a parent and its split child on one device launch from one host thread") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(2, CommConfig(timeout = 10.seconds)) { c ->
            val child = c.split(color = 0)!!
            // Issue 35, finding 3: the parent's and the child's calls in the same order on every rank
            // (NCCL needs one launch order across the communicators of a device; the engine orders
            // their streams in that order, so two ranks issuing in different orders would deadlock).
            coroutineScope {
                repeat(20) {
                    val a = async(start = CoroutineStart.UNDISPATCHED) { c.allReduce(platform.upload(ints(1), c.device)) }
                    val b = async(start = CoroutineStart.UNDISPATCHED) { child.allReduce(platform.upload(ints(2), c.device)) }
                    a.await(); b.await()
                }
            }
            child.close()
        }
        platform.assertNoMisuse()
    }
})
