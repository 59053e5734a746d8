@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.gpu

import dev.tpcomm.PointToPoint
import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.MockPlatform.Companion.A
import dev.tpcomm.gpu.MockPlatform.Companion.COMM
import dev.tpcomm.gpu.MockPlatform.Companion.dev
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import dev.tpcomm.gpu.sim.SimulatedWorld
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.longs.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.shouldNotBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.types.shouldBeInstanceOf
import io.mockk.every
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.util.concurrent.atomic.AtomicInteger
import java.util.concurrent.atomic.AtomicReference
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import kotlinx.coroutines.runBlocking
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/**
 * Issue 18's findings, each as a user's program on the simulated platform (which follows
 * docs/nccl-semantics.md) or on MockK doubles of the seams: real threads, real timeouts, default
 * settings. Each test failed on the engine at 326ca16 (see the closing note).
 */
class NcclSemanticsDefectsTest : FunSpec({
    fun ints(vararg v: Int) = Tensor.of(v)

    test("finding 1: split on NCCL's semantics (ncclSuccess from ncclCommSplit, the parent in progress afterwards) returns a working child on every rank") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(4, CommConfig(timeout = 10.seconds)) { c ->
            val child = c.split(color = c.rank % 2, key = c.rank)
            child shouldNotBe null
            child!!.worldSize shouldBe 2
            platform.download(child.allReduce(platform.upload(ints(c.rank), c.device))).toIntArray().toList() shouldBe
                listOf(if (c.rank % 2 == 0) 0 + 2 else 1 + 3)
            // The parent is usable afterwards (on 326ca16 its next call got ncclInvalidArgument: still in progress).
            platform.download(c.allReduce(platform.upload(ints(1), c.device))).toIntArray().toList() shouldBe listOf(4)
            child.close()
        }
        platform.assertNoMisuse() // no write of the child into a freed out-pointer
    }

    test("finding 1 (MockK): ncclCommSplit returns ncclSuccess, the parent reports ncclInProgress, and the library stores the child later") {
        val p = MockPlatform()
        val c = p.connect()
        val cell = AtomicReference<MemorySegment?>()
        val polls = AtomicInteger()
        every { p.api.commSplit(COMM, any(), any(), any(), any()) } answers { cell.set(arg(3)); arg<MemorySegment>(3).set(ValueLayout.JAVA_LONG, 0, 0L); 0 }
        every { p.api.commGetAsyncError(COMM, any()) } answers {
            // After the split: in progress for two polls, then the job stores the child and the parent turns ready (ncclCommInitRankFunc).
            var state = 0
            val out = cell.get()
            if (out != null) {
                if (polls.incrementAndGet() < 3) {
                    state = NcclResult.IN_PROGRESS
                } else {
                    out.set(ValueLayout.JAVA_LONG, 0, MockPlatform.CHILD)
                    cell.set(null)
                }
            }
            secondArg<IntArray>()[0] = state
            0
        }
        val child = c.split(color = 0)
        child shouldNotBe null
        child!!.close()
        c.close()
    }

    test("finding 2: a child's collective while the parent's point-to-point window is open is not swallowed by the parent's group") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(2, CommConfig(timeout = 10.seconds)) { c ->
            val child = c.split(color = 0, key = c.rank)!!
            val peer = 1 - c.rank
            // Connect the pair first (the first exchange must hold both directions: docs/nccl-semantics.md N9).
            c.sendRecv(listOf(PointToPoint.send(platform.upload(ints(0), c.device), peer), PointToPoint.recv(platform.upload(ints(0), c.device), peer)))
            repeat(5) { i ->
                coroutineScope {
                    // Pipeline-parallel p2p on the parent beside a data-parallel all-reduce on the child.
                    val sent = async(start = CoroutineStart.UNDISPATCHED) { c.send(platform.upload(ints(100 + i), c.device), peer) }
                    val grads = platform.upload(ints(c.rank + 1, i), c.device)
                    val reduced = child.allReduce(grads)
                    platform.download(reduced).toIntArray().toList() shouldBe listOf(3, 2 * i)
                    val got = platform.upload(ints(-1), c.device)
                    c.recv(got, peer)
                    platform.download(got).toIntArray().toList() shouldBe listOf(100 + i)
                    sent.await()
                }
            }
            // A child's close inside the parent's window must not join the parent's group either.
            coroutineScope {
                val sent = async(start = CoroutineStart.UNDISPATCHED) { c.send(platform.upload(ints(7), c.device), peer) }
                child.close()
                c.recv(platform.upload(ints(0), c.device), peer)
                sent.await()
            }
        }
        platform.assertNoMisuse()
    }

    test("finding 3: an output freed by the GC while a kernel on the caller's stream still reads it is freed after that kernel") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(2, CommConfig(timeout = 10.seconds)) { c ->
            val rt = platform.runtime
            rt.setDevice(c.rank) shouldBe 0
            val host = LongArray(1).also { rt.hostAlloc(it, 64) }[0]
            // The user's stream is the legacy default stream (PyTorch's default current stream); a slow kernel runs on it.
            val input = platform.upload(ints(c.rank, c.rank), c.device)
            var out: Tensor? = c.allGather(input)
            val dropped = java.lang.ref.WeakReference(out)
            rt.setDevice(c.rank) shouldBe 0 // the current device is per thread, and the coroutine may have resumed on another one
            val gate = platform.holdStream(0L, device = c.rank)
            // A kernel that reads the output, queued behind the slow one; then the tensor is dropped.
            rt.memcpyAsync(host, out!!.address, out.byteSize, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, 0L) shouldBe 0
            @Suppress("UNUSED_VALUE")
            out = null
            repeat(100) { if (dropped.get() != null) { System.gc(); delay(20) } }
            dropped.get() shouldBe null
            delay(200) // the Cleaner runs and the free is issued
            gate.close()
            rt.setDevice(c.rank) shouldBe 0
            val e = LongArray(1).also { rt.eventCreateDisableTiming(it) }[0]
            rt.eventRecord(e, 0L)
            rt.eventSynchronize(e)
            MemorySegment.ofAddress(host).reinterpret(16).toArray(ValueLayout.JAVA_INT).toList() shouldBe listOf(0, 0, 1, 1)
        }
        platform.assertNoMisuse() // on 326ca16: "device memory ... was used after it was freed"
    }

    test("finding 3b: outputs of a closed parent are freed on a live stream while its child keeps the device's thread") {
        val platform = SimulatedGpuPlatform()
        val comms = SimulatedWorld(platform).connect(CommConfig(worldSize = 2, timeout = 10.seconds))
        val children = coroutineScope { comms.map { c -> async { c.split(color = 0)!! } }.awaitAll() }
        coroutineScope { children.map { ch -> async { ch.barrier() } }.awaitAll() }
        val inputs = comms.map { c -> platform.upload(ints(c.rank), c.device) } // kept: only the outputs may be freed below
        var outs: List<Tensor>? = coroutineScope { comms.mapIndexed { r, c -> async { c.allGather(inputs[r]) } }.awaitAll() }
        val dropped = outs!!.map { java.lang.ref.WeakReference(it) }
        comms.forEach { it.close() }
        val live = platform.liveAllocations
        @Suppress("UNUSED_VALUE")
        outs = null
        repeat(100) { if (dropped.any { it.get() != null }) { System.gc(); delay(20) } }
        delay(200)
        coroutineScope { children.map { ch -> async { ch.barrier() } }.awaitAll() }
        delay(200)
        platform.liveAllocations shouldBe live - 2 // both outputs freed
        inputs.size shouldBe 2
        children.forEach { it.close() }
        platform.assertNoMisuse() // on 326ca16: the frees used the parent's destroyed stream
    }

    test("finding 4: by default a collective is ordered after the work queued on the legacy default stream (the caller's)") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(2, CommConfig(timeout = 10.seconds)) { c ->
            val rt = platform.runtime
            rt.setDevice(c.rank) shouldBe 0
            val t = platform.upload(ints(0, 0), c.device)
            // The user's kernel writes the input on the default stream, behind a slow kernel.
            val gate = platform.holdStream(0L, device = c.rank)
            val src = LongArray(1).also { rt.hostAlloc(it, 8) }[0]
            MemorySegment.ofAddress(src).reinterpret(8).copyFrom(MemorySegment.ofArray(intArrayOf(c.rank + 1, 5)))
            rt.memcpyAsync(t.address, src, 8, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, 0L) shouldBe 0
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

    test("finding 5: NCCL_COMM_BLOCKING=1 in the environment is refused with a message naming it, not left to hang past the deadline") {
        val platform = SimulatedGpuPlatform(environment = mapOf("NCCL_COMM_BLOCKING" to "1"))
        val error = AtomicReference<Throwable?>()
        // Rank 1 never starts; a blocking init would hold the native thread past every deadline.
        val t = Thread.ofPlatform().daemon(true).start {
            val e = runCatching {
                runBlocking {
                    NcclConnector.connect(
                        platform.api, platform.runtime, Device.Cuda(0), CommConfig(worldSize = 2, rank = 0, timeout = 1.seconds),
                        { _, id -> id!! }, "nccl",
                    )
                }
            }.exceptionOrNull()
            error.set(e)
        }
        t.join(5_000)
        t.isAlive shouldBe false
        val e = error.get()
        e.shouldBeInstanceOf<IllegalArgumentException>()
        e.message!! shouldContain "NCCL_COMM_BLOCKING"
    }

    test("finding 6: the deadline runs from the call: a call queued behind a native thread stuck in the library ends at its deadline") {
        val p = MockPlatform()
        val c = p.connect(timeout = 500.milliseconds)
        val release = java.util.concurrent.CountDownLatch(1)
        val first = AtomicInteger()
        // The first event record blocks the native thread for 3 s (a driver call stuck), whatever abort does.
        every { p.runtime.eventRecord(any(), any()) } answers { if (first.getAndIncrement() == 0) release.await(3, java.util.concurrent.TimeUnit.SECONDS); 0 }
        val start = System.nanoTime()
        val results = coroutineScope {
            val a = async(Dispatchers.Default) { runCatching { c.allReduce(dev(A, DType.Float32, 4)) } }
            delay(50)
            val b = async(Dispatchers.Default) { runCatching { c.broadcast(dev(A, DType.Float32, 4), 0) } }
            listOf(a.await(), b.await())
        }
        val ms = (System.nanoTime() - start) / 1_000_000
        release.countDown()
        results.forEach { it.exceptionOrNull().shouldBeInstanceOf<CommunicationTimeoutException>() }
        ms shouldBeLessThan 2_000 // both deadlines are 0.5 s after their calls; the thread is stuck for 3 s
        c.close()
    }

    test("finding 7: independent communicators on one device share one native thread (one launch order per device)") {
        val platform = SimulatedGpuPlatform()
        val a = SimulatedWorld(platform).connect(CommConfig(worldSize = 2, timeout = 10.seconds))
        val b = SimulatedWorld(platform).connect(CommConfig(worldSize = 2, timeout = 10.seconds))
        try {
            coroutineScope {
                // Each rank issues on both worlds in the same order (issue 35, finding 3: NCCL needs one launch
                // order across a device's communicators, and the engine orders their streams in issue order).
                (0 until 2).map { r ->
                    async(Dispatchers.Default) {
                        repeat(10) {
                            val x = async(start = kotlinx.coroutines.CoroutineStart.UNDISPATCHED) { a[r].allReduce(platform.upload(ints(1), a[r].device)) }
                            val y = async(start = kotlinx.coroutines.CoroutineStart.UNDISPATCHED) { b[r].allReduce(platform.upload(ints(1), b[r].device)) }
                            x.await(); y.await()
                        }
                    }
                }.awaitAll()
            }
        } finally {
            (a + b).forEach { it.close() }
        }
        platform.assertNoMisuse() // on 326ca16: "two host threads launch on device 0 for two of its communicators"
    }
})
