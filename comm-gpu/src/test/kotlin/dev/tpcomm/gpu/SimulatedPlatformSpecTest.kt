@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.gpu

import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldBeEmpty
import io.kotest.matchers.collections.shouldNotBeEmpty
import io.kotest.matchers.ints.shouldBeGreaterThan
import io.kotest.matchers.longs.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.shouldNotBe
import io.kotest.matchers.string.shouldContain
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.util.concurrent.Callable
import java.util.concurrent.Executors
import java.util.concurrent.Future
import java.util.concurrent.TimeUnit

/**
 * The simulated platform against docs/nccl-semantics.md: one test per row, named after the row's ID,
 * calling [NcclApi] and [DeviceRuntime] directly as the engine does (no engine involved). A wrong
 * row is one place to fix: the row, the simulator, and the test named after it.
 */
class SimulatedPlatformSpecTest : FunSpec({
    val arena = Arena.ofShared()
    val pool = Executors.newCachedThreadPool { r -> Thread(r).apply { isDaemon = true } }

    fun cell(): MemorySegment = arena.allocate(ValueLayout.JAVA_LONG).also { it.set(ValueLayout.JAVA_LONG, 0, 0L) }

    fun state(api: NcclApi, comm: Long): Int {
        val s = IntArray(1)
        val rc = api.commGetAsyncError(comm, s)
        return if (rc != NcclResult.SUCCESS) rc else s[0]
    }

    /** Polls [comm] until it leaves ncclInProgress (at most [ms]); returns its state. */
    fun settle(api: NcclApi, comm: Long, ms: Long = 5_000): Int {
        val end = System.nanoTime() + ms * 1_000_000
        while (true) {
            val s = state(api, comm)
            if (s != NcclResult.IN_PROGRESS || System.nanoTime() > end) return s
            Thread.sleep(1)
        }
    }

    /** A world of [n] ready communicators, rank r initialised on its own thread with device [device] (r). */
    fun world(p: SimulatedGpuPlatform, n: Int, device: (Int) -> Int = { it }, config: NcclCommConfig = NcclCommConfig()): List<Long> {
        val id = ByteArray(NcclConnector.UNIQUE_ID_BYTES).also { p.api.getUniqueId(it) }
        val futures = (0 until n).map { r ->
            pool.submit(Callable {
                p.runtime.setDevice(device(r))
                val out = cell()
                val rc = p.api.commInitRankConfig(out, n, id, r, config)
                check(rc == NcclResult.SUCCESS || rc == NcclResult.IN_PROGRESS) { "init returned $rc" }
                val comm = out.get(ValueLayout.JAVA_LONG, 0)
                check(settle(p.api, comm) == NcclResult.SUCCESS) { "init of rank $r failed: ${state(p.api, comm)}" }
                comm
            })
        }
        return futures.map { it.get(10, TimeUnit.SECONDS) }
    }

    /** Runs [block] on a thread that has [device] current (the engine's native thread). */
    fun <T> on(p: SimulatedGpuPlatform, device: Int, block: () -> T): Future<T> = pool.submit(Callable { p.runtime.setDevice(device); block() })

    fun stream(p: SimulatedGpuPlatform, device: Int): Long = on(p, device) { LongArray(1).also { p.runtime.streamCreateNonBlocking(it) }[0] }.get()

    fun deviceBuffer(p: SimulatedGpuPlatform, device: Int, bytes: Long): Long = on(p, device) { LongArray(1).also { p.runtime.malloc(it, bytes) }[0] }.get()

    /** Waits until the work queued on [s] so far is done. */
    fun sync(p: SimulatedGpuPlatform, device: Int, s: Long) = on(p, device) {
        val e = LongArray(1).also { p.runtime.eventCreateDisableTiming(it) }[0]
        p.runtime.eventRecord(e, s)
        p.runtime.eventSynchronize(e)
    }.get()

    fun eventAfter(p: SimulatedGpuPlatform, device: Int, s: Long): Long = on(p, device) {
        val e = LongArray(1).also { p.runtime.eventCreateDisableTiming(it) }[0]
        check(p.runtime.eventRecord(e, s) == 0)
        e
    }.get()

    afterSpec { pool.shutdownNow() }

    // ------------------------------------------------------------------ NCCL

    test("N1 ncclGetVersion reports the library's version code") {
        SimulatedGpuPlatform(version = 23007).use { p ->
            val v = IntArray(1)
            p.api.getVersion(v) shouldBe NcclResult.SUCCESS
            v[0] shouldBe 23007
        }
    }

    test("N2 ncclGetUniqueId fills 128 bytes") {
        SimulatedGpuPlatform().use { p ->
            val id = ByteArray(NcclConnector.UNIQUE_ID_BYTES)
            p.api.getUniqueId(id) shouldBe NcclResult.SUCCESS
            id.any { it != 0.toByte() } shouldBe true
        }
    }

    test("N3 non-blocking ncclCommInitRankConfig writes *newcomm before returning ncclInProgress; ready once every rank joined") {
        SimulatedGpuPlatform().use { p ->
            val id = ByteArray(NcclConnector.UNIQUE_ID_BYTES).also { p.api.getUniqueId(it) }
            val out = cell()
            val rc = on(p, 0) { p.api.commInitRankConfig(out, 2, id, 0, NcclCommConfig()) }.get()
            rc shouldBe NcclResult.IN_PROGRESS
            val comm = out.get(ValueLayout.JAVA_LONG, 0)
            comm shouldNotBe 0L
            Thread.sleep(50)
            state(p.api, comm) shouldBe NcclResult.IN_PROGRESS
            val out1 = cell()
            on(p, 1) { p.api.commInitRankConfig(out1, 2, id, 1, NcclCommConfig()) }.get()
            settle(p.api, comm) shouldBe NcclResult.SUCCESS
            settle(p.api, out1.get(ValueLayout.JAVA_LONG, 0)) shouldBe NcclResult.SUCCESS
            p.assertNoMisuse()
        }
    }

    test("N4 non-blocking ncclCommSplit returns ncclSuccess with *newcomm NULL and the parent in progress; the job stores the child later") {
        SimulatedGpuPlatform().use { p ->
            val comms = world(p, 2)
            val out0 = cell()
            on(p, 0) { p.api.commSplit(comms[0], 0, 0, out0, null) }.get() shouldBe NcclResult.SUCCESS
            out0.get(ValueLayout.JAVA_LONG, 0) shouldBe 0L
            state(p.api, comms[0]) shouldBe NcclResult.IN_PROGRESS
            // A call on the parent before it is ready again: ncclCommEnsureReady, ncclInvalidArgument.
            val buf = deviceBuffer(p, 0, 4)
            val s0 = stream(p, 0)
            on(p, 0) { p.api.allReduce(buf, buf, 1, NcclDataType.INT32, NcclRedOp.SUM, comms[0], s0) }.get() shouldBe NcclResult.INVALID_ARGUMENT
            Thread.sleep(50)
            out0.get(ValueLayout.JAVA_LONG, 0) shouldBe 0L // rank 1 has not split yet
            val out1 = cell()
            on(p, 1) { p.api.commSplit(comms[1], NcclVersion.SPLIT_NOCOLOR, 0, out1, null) }.get() shouldBe NcclResult.SUCCESS
            settle(p.api, comms[0]) shouldBe NcclResult.SUCCESS
            settle(p.api, comms[1]) shouldBe NcclResult.SUCCESS
            val child = out0.get(ValueLayout.JAVA_LONG, 0)
            child shouldNotBe 0L
            out1.get(ValueLayout.JAVA_LONG, 0) shouldBe 0L // NCCL_SPLIT_NOCOLOR: no communicator
            val n = IntArray(1)
            p.api.commCount(child, n) shouldBe NcclResult.SUCCESS
            n[0] shouldBe 1
        }
    }

    test("N5 two ranks of one communicator on one device: ncclInvalidUsage from the init job, unless NCCL_MULTI_RANK_GPU_ENABLE=1") {
        SimulatedGpuPlatform().use { p ->
            val id = ByteArray(NcclConnector.UNIQUE_ID_BYTES).also { p.api.getUniqueId(it) }
            val results = (0 until 2).map { r ->
                on(p, 0) {
                    val out = cell()
                    val rc = p.api.commInitRankConfig(out, 2, id, r, NcclCommConfig())
                    if (rc != NcclResult.IN_PROGRESS) rc else settle(p.api, out.get(ValueLayout.JAVA_LONG, 0))
                }
            }.map { it.get(10, TimeUnit.SECONDS) }
            results shouldBe listOf(NcclResult.INVALID_USAGE, NcclResult.INVALID_USAGE)
        }
        SimulatedGpuPlatform(environment = mapOf("NCCL_MULTI_RANK_GPU_ENABLE" to "1")).use { p ->
            world(p, 2, device = { 0 }).size shouldBe 2
        }
    }

    test("N6 NCCL_COMM_BLOCKING=1 makes a communicator asked to be non-blocking blocking: init returns only when every rank joined") {
        SimulatedGpuPlatform(environment = mapOf("NCCL_COMM_BLOCKING" to "1")).use { p ->
            val id = ByteArray(NcclConnector.UNIQUE_ID_BYTES).also { p.api.getUniqueId(it) }
            val out0 = cell()
            val rank0 = on(p, 0) { p.api.commInitRankConfig(out0, 2, id, 0, NcclCommConfig(blocking = false)) }
            Thread.sleep(200)
            rank0.isDone shouldBe false // blocked in the call, as a blocking init is
            val out1 = cell()
            on(p, 1) { p.api.commInitRankConfig(out1, 2, id, 1, NcclCommConfig(blocking = false)) }.get(5, TimeUnit.SECONDS) shouldBe NcclResult.SUCCESS
            rank0.get(5, TimeUnit.SECONDS) shouldBe NcclResult.SUCCESS
        }
    }

    test("N7 collectives: ncclInProgress outside a group, then ready; inside a group ncclSuccess and nothing launched before ncclGroupEnd") {
        SimulatedGpuPlatform().use { p ->
            val comms = world(p, 2)
            val bufs = (0 until 2).map { r -> deviceBuffer(p, r, 4) }
            val streams = (0 until 2).map { r -> stream(p, r) }
            val rcs = (0 until 2).map { r -> on(p, r) { p.api.allReduce(bufs[r], bufs[r], 1, NcclDataType.INT32, NcclRedOp.SUM, comms[r], streams[r]) } }.map { it.get() }
            rcs shouldBe listOf(NcclResult.IN_PROGRESS, NcclResult.IN_PROGRESS)
            comms.forEach { settle(p.api, it) shouldBe NcclResult.SUCCESS }
            (0 until 2).forEach { r -> sync(p, r, streams[r]) }
            // Inside a group: deferred to the calling thread's ncclGroupEnd.
            val grouped = on(p, 0) {
                p.api.groupStart()
                val rc = p.api.allReduce(bufs[0], bufs[0], 1, NcclDataType.INT32, NcclRedOp.SUM, comms[0], streams[0])
                val e = LongArray(1).also { p.runtime.eventCreateDisableTiming(it) }[0]
                p.runtime.eventRecord(e, streams[0])
                Thread.sleep(20)
                val before = p.runtime.eventQuery(e) // nothing was enqueued: the event is complete
                p.api.groupEnd()
                rc to before
            }.get()
            grouped shouldBe (NcclResult.SUCCESS to 0)
            on(p, 1) { p.api.allReduce(bufs[1], bufs[1], 1, NcclDataType.INT32, NcclRedOp.SUM, comms[1], streams[1]) }.get()
            comms.forEach { settle(p.api, it) shouldBe NcclResult.SUCCESS }
        }
    }

    test("N8 a world of one: collectives return ncclSuccess at once (even non-blocking), in place nothing is launched, out of place a copy on the stream") {
        SimulatedGpuPlatform().use { p ->
            val comm = world(p, 1).single()
            val s = stream(p, 0)
            val hold = p.holdStream(s)
            val buf = deviceBuffer(p, 0, 4)
            on(p, 0) { p.api.allReduce(buf, buf, 1, NcclDataType.INT32, NcclRedOp.SUM, comm, s) }.get() shouldBe NcclResult.SUCCESS
            state(p.api, comm) shouldBe NcclResult.SUCCESS
            // Inside a group too: the single-rank path launches at the call, not at ncclGroupEnd.
            val out = deviceBuffer(p, 0, 4)
            on(p, 0) {
                p.api.groupStart()
                val rc = p.api.allReduce(buf, out, 1, NcclDataType.INT32, NcclRedOp.SUM, comm, s)
                p.api.groupEnd() to rc
            }.get() shouldBe (NcclResult.SUCCESS to NcclResult.SUCCESS)
            state(p.api, comm) shouldBe NcclResult.SUCCESS
            hold.close()
            sync(p, 0, s)
            p.assertNoMisuse()
        }
    }

    test("N9 the first point-to-point to a peer connects in the group job and waits for the peer; once connected, a small send needs no receiver") {
        SimulatedGpuPlatform().use { p ->
            val comms = world(p, 2)
            val streams = (0 until 2).map { r -> stream(p, r) }
            val src = deviceBuffer(p, 0, 64)
            val dst = deviceBuffer(p, 1, 64)
            val rc = on(p, 0) { p.api.groupStart(); p.api.send(src, 64, NcclDataType.UINT8, 1, comms[0], streams[0]); p.api.groupEnd() }.get()
            rc shouldBe NcclResult.IN_PROGRESS
            Thread.sleep(200)
            state(p.api, comms[0]) shouldBe NcclResult.IN_PROGRESS // connecting: rank 1 has not posted its side
            on(p, 1) { p.api.groupStart(); p.api.recv(dst, 64, NcclDataType.UINT8, 0, comms[1], streams[1]); p.api.groupEnd() }.get()
            settle(p.api, comms[0]) shouldBe NcclResult.SUCCESS
            settle(p.api, comms[1]) shouldBe NcclResult.SUCCESS
            sync(p, 0, streams[0]); sync(p, 1, streams[1])
            // Connected now: a second small send completes into the connection buffer with no receive posted.
            on(p, 0) { p.api.groupStart(); p.api.send(src, 64, NcclDataType.UINT8, 1, comms[0], streams[0]); p.api.groupEnd() }.get()
            settle(p.api, comms[0]) shouldBe NcclResult.SUCCESS
            val e = eventAfter(p, 0, streams[0])
            val end = System.nanoTime() + 2_000_000_000L
            while (p.runtime.eventQuery(e) != 0 && System.nanoTime() < end) Thread.sleep(1)
            p.runtime.eventQuery(e) shouldBe 0
            on(p, 1) { p.api.groupStart(); p.api.recv(dst, 64, NcclDataType.UINT8, 0, comms[1], streams[1]); p.api.groupEnd() }.get()
            settle(p.api, comms[1]) shouldBe NcclResult.SUCCESS
            p.assertNoMisuse()
        }
    }

    test("N10 group depth is per thread: another thread's calls are not deferred; ncclGroupEnd outside a group is ncclInvalidUsage") {
        SimulatedGpuPlatform().use { p ->
            val comm = world(p, 1).single()
            val s = stream(p, 0)
            val buf = deviceBuffer(p, 0, 4)
            val out = deviceBuffer(p, 0, 4)
            on(p, 0) { p.api.groupEnd() }.get() shouldBe NcclResult.INVALID_USAGE
            val opened = on(p, 0) { p.api.groupStart() }.get() // a pool thread keeps depth 1
            opened shouldBe NcclResult.SUCCESS
            val other = Thread.ofPlatform().start { p.runtime.setDevice(0); p.api.allReduce(buf, out, 1, NcclDataType.INT32, NcclRedOp.SUM, comm, s) }
            other.join(2_000)
            sync(p, 0, s)
            p.assertNoMisuse()
        }
    }

    test("N11 non-blocking ncclCommFinalize returns ncclInProgress and the communicator takes no other call until it is done") {
        SimulatedGpuPlatform().use { p ->
            val comms = world(p, 2)
            val streams = (0 until 2).map { r -> stream(p, r) }
            val bufs = (0 until 2).map { r -> deviceBuffer(p, r, 4) }
            // Rank 0's all-reduce waits for rank 1: finalize must flush it.
            on(p, 0) { p.api.allReduce(bufs[0], bufs[0], 1, NcclDataType.INT32, NcclRedOp.SUM, comms[0], streams[0]) }.get()
            settle(p.api, comms[0]) shouldBe NcclResult.SUCCESS
            on(p, 0) { p.api.commFinalize(comms[0]) }.get() shouldBe NcclResult.IN_PROGRESS
            state(p.api, comms[0]) shouldBe NcclResult.IN_PROGRESS
            on(p, 0) { p.api.allReduce(bufs[0], bufs[0], 1, NcclDataType.INT32, NcclRedOp.SUM, comms[0], streams[0]) }.get() shouldBe NcclResult.INVALID_ARGUMENT
            on(p, 1) { p.api.allReduce(bufs[1], bufs[1], 1, NcclDataType.INT32, NcclRedOp.SUM, comms[1], streams[1]) }.get()
            settle(p.api, comms[0]) shouldBe NcclResult.SUCCESS
            p.misuse.shouldNotBeEmpty() // the call during finalize
        }
    }

    test("N11 finalize is in progress until the work is flushed and a second finalize is ncclInvalidArgument") {
        SimulatedGpuPlatform().use { p ->
            val comms = world(p, 2)
            val streams = (0 until 2).map { r -> stream(p, r) }
            val bufs = (0 until 2).map { r -> deviceBuffer(p, r, 4) }
            // A finalize while the communicator is still in progress (a send connecting to a peer that has
            // not posted its side: N9): refused, and the state is that error.
            on(p, 0) { p.api.groupStart(); p.api.send(bufs[0], 4, NcclDataType.UINT8, 1, comms[0], streams[0]); p.api.groupEnd() }.get() shouldBe NcclResult.IN_PROGRESS
            on(p, 0) { p.api.commFinalize(comms[0]) }.get() shouldBe NcclResult.INVALID_ARGUMENT
            state(p.api, comms[0]) shouldBe NcclResult.INVALID_ARGUMENT
            on(p, 1) { p.api.commFinalize(comms[1]) }.get() shouldBe NcclResult.IN_PROGRESS
            settle(p.api, comms[1]) shouldBe NcclResult.SUCCESS
            on(p, 1) { p.api.commFinalize(comms[1]) }.get() shouldBe NcclResult.INVALID_ARGUMENT
            state(p.api, comms[1]) shouldBe NcclResult.INVALID_ARGUMENT
        }
    }

    test("N12 ncclCommAbort frees the communicator: a later call with its handle is a use after free, recorded as misuse") {
        SimulatedGpuPlatform().use { p ->
            val comm = world(p, 1).single()
            on(p, 0) { p.api.commAbort(comm) }.get() shouldBe NcclResult.SUCCESS
            p.assertNoMisuse()
            state(p.api, comm) shouldNotBe NcclResult.SUCCESS
            p.misuse.single() shouldContain "after"
        }
    }

    test("N12 ncclCommAbort inside an open group is recorded as misuse (it joins the group)") {
        SimulatedGpuPlatform().use { p ->
            val comm = world(p, 1).single()
            on(p, 0) { p.api.groupStart(); val rc = p.api.commAbort(comm); p.api.groupEnd(); rc }.get()
            p.misuse.shouldNotBeEmpty()
        }
    }

    test("N13 ncclCommDestroy without ncclCommFinalize is recorded; after finalize it is clean") {
        SimulatedGpuPlatform().use { p ->
            val comms = world(p, 1)
            on(p, 0) { p.api.commFinalize(comms[0]) }.get()
            settle(p.api, comms[0]) shouldBe NcclResult.SUCCESS
            on(p, 0) { p.api.commDestroy(comms[0]) }.get() shouldBe NcclResult.SUCCESS
            p.assertNoMisuse()
            val other = world(p, 1).single()
            on(p, 0) { p.api.commDestroy(other) }.get()
            p.misuse.single() shouldContain "ncclCommFinalize"
        }
    }

    test("N14 ncclCommGetAsyncError reports an asynchronous error") {
        SimulatedGpuPlatform().use { p ->
            val comm = world(p, 1).single()
            state(p.api, comm) shouldBe NcclResult.SUCCESS
            p.injectAsyncError(0, NcclResult.REMOTE_ERROR)
            state(p.api, comm) shouldBe NcclResult.REMOTE_ERROR
        }
    }

    test("N15 ncclCommCount and ncclCommUserRank") {
        SimulatedGpuPlatform().use { p ->
            val comms = world(p, 3)
            comms.forEachIndexed { r, c ->
                val n = IntArray(1); val me = IntArray(1)
                p.api.commCount(c, n) shouldBe NcclResult.SUCCESS
                p.api.commUserRank(c, me) shouldBe NcclResult.SUCCESS
                n[0] shouldBe 3; me[0] shouldBe r
            }
        }
    }

    test("N16 ncclGetErrorString and ncclGetLastError") {
        SimulatedGpuPlatform().use { p ->
            p.api.getErrorString(NcclResult.INVALID_USAGE).length shouldBeGreaterThan 0
            val comm = world(p, 1).single()
            p.api.getLastError(comm) shouldBe null
        }
    }

    test("N17 launches for two communicators of one device from two live host threads are recorded (one launch order per device)") {
        SimulatedGpuPlatform().use { p ->
            val a = world(p, 1).single()
            val b = world(p, 1).single()
            val s = stream(p, 0)
            val buf = deviceBuffer(p, 0, 4)
            val keep = java.util.concurrent.CountDownLatch(1)
            val t1 = Thread.ofPlatform().start { p.runtime.setDevice(0); p.api.allReduce(buf, buf, 1, NcclDataType.INT32, NcclRedOp.SUM, a, s); keep.await() }
            Thread.sleep(20)
            val t2 = Thread.ofPlatform().start { p.runtime.setDevice(0); p.api.allReduce(buf, buf, 1, NcclDataType.INT32, NcclRedOp.SUM, b, s) }
            t2.join()
            keep.countDown(); t1.join()
            p.misuse.shouldNotBeEmpty()
        }
    }

    // ------------------------------------------------------------------ CUDA / HIP runtime

    test("C1 the current device is per thread; a thread that never set one acts on device 0 and is recorded") {
        SimulatedGpuPlatform().use { p ->
            on(p, 3) { IntArray(1).also { p.runtime.getDevice(it) }[0] }.get() shouldBe 3
            Thread.ofPlatform().start { p.runtime.streamCreateNonBlocking(LongArray(1)) }.join()
            p.implicitDeviceCalls.shouldNotBeEmpty()
        }
    }

    test("C2 a non-blocking stream is not ordered with the legacy default stream") {
        SimulatedGpuPlatform().use { p ->
            val s = stream(p, 0)
            val hold = p.holdStream(s)
            val e = eventAfter(p, 0, 0L)
            val end = System.nanoTime() + 2_000_000_000L
            while (p.runtime.eventQuery(e) != 0 && System.nanoTime() < end) Thread.sleep(1)
            p.runtime.eventQuery(e) shouldBe 0
            hold.close()
        }
    }

    test("C3 cudaStreamDestroy returns at once with work pending, the work completes; a later use of the handle is recorded") {
        SimulatedGpuPlatform().use { p ->
            val s = stream(p, 0)
            val hold = p.holdStream(s)
            val e = eventAfter(p, 0, s)
            val t0 = System.nanoTime()
            on(p, 0) { p.runtime.streamDestroy(s) }.get() shouldBe 0
            (System.nanoTime() - t0) shouldBeLessThan 1_000_000_000L
            hold.close()
            on(p, 0) { p.runtime.eventSynchronize(e) }.get() shouldBe 0
            p.assertNoMisuse()
            on(p, 0) { p.runtime.eventRecord(e, s) }.get() shouldNotBe 0
            p.misuse.shouldNotBeEmpty()
        }
    }

    test("C4 events: a never-recorded event is complete; recorded behind work it is not ready until the work ran") {
        SimulatedGpuPlatform().use { p ->
            val e = on(p, 0) { LongArray(1).also { p.runtime.eventCreateDisableTiming(it) }[0] }.get()
            p.runtime.eventQuery(e) shouldBe 0
            val s = stream(p, 0)
            val hold = p.holdStream(s)
            on(p, 0) { p.runtime.eventRecord(e, s) }.get()
            p.runtime.eventQuery(e) shouldBe DeviceRuntime.ERROR_NOT_READY
            hold.close()
            on(p, 0) { p.runtime.eventSynchronize(e) }.get() shouldBe 0
            on(p, 0) { p.runtime.eventDestroy(e) }.get() shouldBe 0
        }
    }

    test("C5 cudaStreamWaitEvent orders later work of a stream after the event") {
        SimulatedGpuPlatform().use { p ->
            val a = stream(p, 0)
            val b = stream(p, 0)
            val hold = p.holdStream(a)
            val ea = eventAfter(p, 0, a)
            on(p, 0) { p.runtime.streamWaitEvent(b, ea) }.get() shouldBe 0
            val eb = eventAfter(p, 0, b)
            Thread.sleep(50)
            p.runtime.eventQuery(eb) shouldBe DeviceRuntime.ERROR_NOT_READY
            hold.close()
            on(p, 0) { p.runtime.eventSynchronize(eb) }.get() shouldBe 0
        }
    }

    test("C6 cudaFree waits for the device's work") {
        SimulatedGpuPlatform().use { p ->
            val s = stream(p, 0)
            val buf = deviceBuffer(p, 0, 16)
            val hold = p.holdStream(s)
            val free = on(p, 0) { p.runtime.free(buf) }
            Thread.sleep(100)
            free.isDone shouldBe false
            hold.close()
            free.get(5, TimeUnit.SECONDS) shouldBe 0
        }
    }

    test("C7 cudaFreeAsync is stream-ordered: work of another stream not ordered after the free touches freed memory (recorded); freeing on a destroyed stream is recorded") {
        SimulatedGpuPlatform().use { p ->
            val comm = stream(p, 0)
            val user = stream(p, 0)
            val buf = on(p, 0) { LongArray(1).also { p.runtime.mallocAsync(it, 64, comm) }[0] }.get()
            val host = p.runtime.let { LongArray(1).also { a -> it.hostAlloc(a, 64) }[0] }
            val hold = p.holdStream(user)
            on(p, 0) { p.runtime.memcpyAsync(host, buf, 64, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, user) }.get() shouldBe 0
            on(p, 0) { p.runtime.freeAsync(buf, comm) }.get() shouldBe 0
            sync(p, 0, comm)
            p.assertNoMisuse()
            hold.close()
            sync(p, 0, user)
            p.misuse.single() shouldContain "freed"
            val other = on(p, 0) { LongArray(1).also { p.runtime.mallocAsync(it, 64, comm) }[0] }.get()
            on(p, 0) { p.runtime.streamDestroy(comm) }.get()
            on(p, 0) { p.runtime.freeAsync(other, comm) }.get() shouldNotBe 0
            p.misuse.size shouldBe 2
        }
    }

    test("C8 cudaHostAlloc memory is page-locked: copies with it never block") {
        SimulatedGpuPlatform().use { p ->
            val s = stream(p, 0)
            val buf = deviceBuffer(p, 0, 64)
            val host = LongArray(1).also { p.runtime.hostAlloc(it, 64) }[0]
            val hold = p.holdStream(s)
            on(p, 0) { p.runtime.memcpyAsync(host, buf, 64, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, s) }.get(2, TimeUnit.SECONDS) shouldBe 0
            hold.close()
            sync(p, 0, s)
            p.runtime.freeHost(host) shouldBe 0
            p.blockingPageableCopies shouldBe 0
        }
    }

    test("C9 cudaMemcpyAsync with pageable host memory returns only once the copy is done") {
        SimulatedGpuPlatform().use { p ->
            val s = stream(p, 0)
            val buf = deviceBuffer(p, 0, 64)
            val pageable = Arena.ofAuto().allocate(64)
            val hold = p.holdStream(s)
            val copy = on(p, 0) { p.runtime.memcpyAsync(pageable.address(), buf, 64, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, s) }
            Thread.sleep(100)
            copy.isDone shouldBe false
            hold.close()
            copy.get(5, TimeUnit.SECONDS) shouldBe 0
            p.blockingPageableCopies shouldBe 1
        }
    }

    test("C10 cudaMemcpy2DAsync copies rows between pitches") {
        SimulatedGpuPlatform().use { p ->
            val s = stream(p, 0)
            val host = LongArray(1).also { p.runtime.hostAlloc(it, 64) }[0]
            val seg = MemorySegment.ofAddress(host).reinterpret(64)
            for (i in 0 until 16) seg.setAtIndex(ValueLayout.JAVA_BYTE, i.toLong(), i.toByte())
            val out = LongArray(1).also { p.runtime.hostAlloc(it, 64) }[0]
            // 4 rows of 2 bytes, source pitch 4, destination pitch 2.
            on(p, 0) { p.runtime.memcpy2DAsync(out, 2, host, 4, 2, 4, DeviceRuntime.MEMCPY_HOST_TO_HOST, s) }.get() shouldBe 0
            sync(p, 0, s)
            val o = MemorySegment.ofAddress(out).reinterpret(8)
            (0 until 8).map { o.getAtIndex(ValueLayout.JAVA_BYTE, it.toLong()).toInt() } shouldBe listOf(0, 1, 4, 5, 8, 9, 12, 13)
        }
    }

    test("C11 the legacy default stream (handle 0) runs its work in order on the current device; an event on it orders another stream") {
        SimulatedGpuPlatform().use { p ->
            val legacyHold = p.holdStream(0L, device = 0)
            val e = eventAfter(p, 0, 0L)
            val s = stream(p, 0)
            on(p, 0) { p.runtime.streamWaitEvent(s, e) }.get() shouldBe 0
            val after = eventAfter(p, 0, s)
            Thread.sleep(50)
            p.runtime.eventQuery(after) shouldBe DeviceRuntime.ERROR_NOT_READY
            legacyHold.close()
            on(p, 0) { p.runtime.eventSynchronize(after) }.get() shouldBe 0
            p.implicitDeviceCalls.shouldBeEmpty()
        }
    }
})
