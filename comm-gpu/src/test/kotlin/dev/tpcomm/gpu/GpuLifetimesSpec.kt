@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.Device
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.sim.InMemoryBootstrap
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import dev.tpcomm.gpu.sim.SimulatedNccl
import dev.tpcomm.gpu.sim.SimulatedWorld
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldBeEmpty
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.string.shouldNotContain
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import kotlinx.coroutines.withContext
import java.nio.file.Files
import java.nio.file.Path
import kotlin.time.Duration.Companion.seconds

/**
 * Issue 35's findings 1-6 and 8 (finding 7 is the JavaCPP binding's: comm-nccl
 * `JavaCppAllocationsTest`), one case each, numbered as the issue numbers them (finding 4 has a
 * second case, "finding 4 (bound)": the forced abort's retries are bounded). Each runs the real
 * engine on the simulated platform, whose lifetime rules (thread-local group job before NCCL
 * 2.27.3, init inside an open group, an abort racing a call, launch order across communicators)
 * are `SimulatedLifetimes`' and docs/nccl-semantics.md's N3, N10a, N12a, N17a; every case fails on
 * recorded misuse.
 */
class GpuLifetimesSpec : FunSpec({
    fun ints(vararg v: Int) = Tensor.of(v)
    fun sim(platform: SimulatedGpuPlatform) = platform.api as SimulatedNccl

    suspend fun connect(
        platform: SimulatedGpuPlatform, threads: DeviceThreads, device: Int, worldSize: Int, rank: Int,
        bootstrap: BootstrapChannel = InMemoryBootstrap(), timeout: kotlin.time.Duration = 10.seconds,
    ): NcclCommunicator = NcclConnector.connect(
        platform.api, platform.runtime, Device.Cuda(device), CommConfig(worldSize = worldSize, rank = rank, timeout = timeout),
        bootstrap, "nccl", NcclCommConfig(), null, threads,
    )

    test("finding 1: on NCCL 2.26 another communicator of the device issues while an init is in flight, without running the init's thread-local group job twice") {
        val platform = SimulatedGpuPlatform(version = 22606)
        sim(platform).lifetimes.threadLocalGroupJob shouldBe true
        val process0 = DeviceThreads()
        val process1 = DeviceThreads()
        withContext(Dispatchers.Default) {
            val a = connect(platform, process0, 0, 1, 0)
            val bootstrap = InMemoryBootstrap()
            // Rank 0 of a second world starts its init; its peer comes only later.
            val b0 = async { connect(platform, process0, 0, 2, 0, bootstrap) }
            delay(300)
            // Meanwhile the first world works on the same device's thread.
            platform.download(a.allReduce(platform.upload(ints(7), Device.Cuda(0)))).toIntArray().toList() shouldBe listOf(7)
            val b1 = connect(platform, process1, 1, 2, 1, bootstrap)
            val b = b0.await()
            coroutineScope {
                val r0 = async { b.allReduce(platform.upload(ints(1), Device.Cuda(0))) }
                val r1 = async { b1.allReduce(platform.upload(ints(2), Device.Cuda(1))) }
                platform.download(r0.await()).toIntArray().toList() shouldBe listOf(3)
                platform.download(r1.await()).toIntArray().toList() shouldBe listOf(3)
            }
            listOf(a, b, b1).forEach { it.close() }
        }
        platform.assertNoMisuse()
    }

    test("finding 2: an init while another communicator's point-to-point window is open on the device's thread is not left inside that group (N3)") {
        val platform = SimulatedGpuPlatform()
        val threads = DeviceThreads()
        withContext(Dispatchers.Default) {
            // The device's thread, with a window (an open NCCL group) of another communicator on it.
            val (thread, _) = threads.acquire(platform.runtime, 0, "nccl")
            val window = object : P2pWindow {
                override fun endP2pWindow() {
                    if (thread.p2pOwner !== this) return
                    thread.p2pOwner = null
                    platform.api.groupEnd()
                    thread.groupDepth--
                }
            }
            thread.dispatcher.execute {
                platform.runtime.setDevice(0)
                platform.api.groupStart()
                thread.groupDepth++
                thread.p2pOwner = window
            }
            val c = connect(platform, threads, 0, 1, 0)
            platform.download(c.allReduce(platform.upload(ints(5), Device.Cuda(0)))).toIntArray().toList() shouldBe listOf(5)
            thread.dispatcher.execute { window.endP2pWindow() }
            c.close()
            thread.release(1_000_000_000L)
        }
        platform.assertNoMisuse()
    }

    test("finding 3: two worlds on the same devices launch in an order the device keeps (stream dependencies; NCCL_LAUNCH_ORDER_IMPLICIT unset)") {
        val platform = SimulatedGpuPlatform()
        val world = SimulatedWorld(platform)
        withContext(Dispatchers.Default) {
            val w1 = world.connect(CommConfig(worldSize = 2, timeout = 10.seconds))
            val w2 = world.connect(CommConfig(worldSize = 2, timeout = 10.seconds))
            val results = (0 until 2).map { r ->
                async {
                    val x = w1[r].allReduce(platform.upload(ints(r + 1), Device.Cuda(r)))
                    val y = w2[r].allReduce(platform.upload(ints(10 * (r + 1)), Device.Cuda(r)))
                    platform.download(x).toIntArray().toList() + platform.download(y).toIntArray().toList()
                }
            }.map { it.await() }
            results shouldBe listOf(listOf(3, 30), listOf(3, 30))
            (w1 + w2).forEach { it.close() }
        }
        platform.assertNoMisuse()
    }

    test("finding 4: an abort requested while the device's thread is inside a call on the communicator never runs ncclCommAbort beside that call") {
        val platform = SimulatedGpuPlatform()
        withContext(Dispatchers.Default) {
            val comms = SimulatedWorld(platform).connect(CommConfig(worldSize = 2, timeout = 30.seconds))
            val c = comms[0]
            // Rank 1 never joins: rank 0's all-reduce stays in flight, its thread polling the communicator.
            val inFlight = async(start = CoroutineStart.UNDISPATCHED) { runCatching { c.allReduce(platform.upload(ints(1), Device.Cuda(0))) } }
            delay(100)
            platform.slowAsyncErrorPollMillis = 400 // each ncclCommGetAsyncError now holds the thread inside the library
            delay(200)
            c.abort("finding 4")
            (inFlight.await().exceptionOrNull() is CommunicationException) shouldBe true
            platform.slowAsyncErrorPollMillis = 0
            comms.forEach { it.close() }
        }
        platform.misuse.filter { "inside another call" in it }.shouldBeEmpty()
        platform.assertNoMisuse()
    }

    test("finding 4 (bound): a forced abort that never gets in stops at its bound with AbortIncompleteException logged; the caller has its exception; the queued abort runs once the call returns") {
        val platform = SimulatedGpuPlatform()
        val records = java.util.concurrent.CopyOnWriteArrayList<java.util.logging.LogRecord>()
        val logger = java.util.logging.Logger.getLogger("dev.tpcomm.engine.AbortEscalation")
        val handler = object : java.util.logging.Handler() {
            override fun publish(record: java.util.logging.LogRecord) { records += record }
            override fun flush() {}
            override fun close() {}
        }
        logger.addHandler(handler)
        try {
            withContext(Dispatchers.Default) {
                // Timeout 1 s: the escalation's bound (NcclCommHandle.escalationBoundMillis) is 1 s.
                val comms = SimulatedWorld(platform).connect(CommConfig(worldSize = 2, timeout = 1.seconds, creationTimeout = 10.seconds))
                val c = comms[0]
                val inFlight = async(start = CoroutineStart.UNDISPATCHED) { runCatching { c.allReduce(platform.upload(ints(1), Device.Cuda(0))) } }
                delay(100)
                platform.slowAsyncErrorPollMillis = 4_000 // the device's thread is held inside one ncclCommGetAsyncError for 4 s
                delay(200)
                val start = System.nanoTime()
                c.abort("finding 4, bound")
                (inFlight.await().exceptionOrNull() is CommunicationException) shouldBe true
                while (records.isEmpty() && System.nanoTime() - start < 3_000_000_000L) delay(20)
                val ms = (System.nanoTime() - start) / 1_000_000
                (ms < 2_500) shouldBe true // grace 100 ms + bound 1 s, while the call still holds the communicator
                val thrown = records.single().thrown
                (thrown is dev.tpcomm.engine.AbortIncompleteException) shouldBe true
                thrown.message!! shouldContain "ncclCommAbort"
                delay(200)
                Thread.getAllStackTraces().keys.filter { it.name == "tpcomm-nccl-abort" && it.isAlive }.shouldBeEmpty()
                platform.slowAsyncErrorPollMillis = 0
                // The 4 s call returns at about 4.1 s; the abort queued on the device's thread then runs.
                delay(2_800)
                sim(platform).liveComms.filter { it.rank == 0 && it.device == 0 }.shouldBeEmpty()
                comms.forEach { it.close() }
            }
        } finally {
            logger.removeHandler(handler)
        }
        sim(platform).liveComms.shouldBeEmpty()
        platform.misuse.filter { "inside another call" in it }.shouldBeEmpty()
        platform.assertNoMisuse()
    }

    test("finding 5: a split that timed out leaves no half-built child communicator behind") {
        val platform = SimulatedGpuPlatform()
        withContext(Dispatchers.Default) {
            val comms = SimulatedWorld(platform).connect(CommConfig(worldSize = 2, timeout = 1.seconds, creationTimeout = 1.seconds))
            // Rank 1 never splits: rank 0's split times out, and aborts its parent.
            shouldThrow<CommunicationException> { comms[0].split(color = 0, key = 0) }
            comms.forEach { it.close() }
        }
        sim(platform).liveComms.shouldBeEmpty()
        platform.assertNoMisuse()
    }

    test("finding 6: NCCL_COMM_BLOCKING=1 is refused however NCCL would read it (0x1, 01, a configuration file)") {
        for (value in listOf("0x1", "01", " 1")) {
            val platform = SimulatedGpuPlatform(environment = mapOf("NCCL_COMM_BLOCKING" to value))
            val e = shouldThrow<IllegalArgumentException> { connect(platform, DeviceThreads(), 0, 1, 0) }
            e.message shouldContain "NCCL_COMM_BLOCKING"
        }
        val conf = Files.createTempFile("nccl", ".conf")
        try {
            Files.writeString(conf, "# tpcomm test\nNCCL_DEBUG=WARN\nNCCL_COMM_BLOCKING=1\n")
            val platform = SimulatedGpuPlatform(environment = mapOf("NCCL_CONF_FILE" to conf.toString()))
            val e = shouldThrow<IllegalArgumentException> { connect(platform, DeviceThreads(), 0, 1, 0) }
            e.message shouldContain conf.toString()
        } finally {
            Files.deleteIfExists(conf)
        }
        // 0 and unset stay accepted.
        val platform = SimulatedGpuPlatform(environment = mapOf("NCCL_COMM_BLOCKING" to "0"))
        connect(platform, DeviceThreads(), 0, 1, 0).close()
        platform.assertNoMisuse()
    }

    test("finding 8: nccl-semantics.md and split_probe.cu say what the engine and N4 say") {
        val root = generateSequence(Path.of("").toAbsolutePath()) { it.parent }.first { Files.exists(it.resolve("docs/nccl-semantics.md")) }
        val semantics = Files.readString(root.resolve("docs/nccl-semantics.md"))
        // The engine polls ncclCommGetAsyncError where a call returned ncclInProgress (NcclOp.nccl), after a split
        // (whatever it returned, N4), an init and a finalize, and with every completion poll: not "after every call".
        semantics shouldNotContain "poll `ncclCommGetAsyncError` after every call"
        val probe = Files.readString(root.resolve("scripts/gpu/split_probe.cu"))
        // N4: a non-blocking ncclCommSplit returns ncclSuccess while the child is still being built.
        probe shouldNotContain "Expected: ncclInProgress returned"
        probe shouldContain "Expected: ncclSuccess returned"
    }
})
