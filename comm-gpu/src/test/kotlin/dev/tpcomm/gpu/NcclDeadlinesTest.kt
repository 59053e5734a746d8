@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.engine.OperationCall
import dev.tpcomm.gpu.MockPlatform.Companion.A
import dev.tpcomm.gpu.MockPlatform.Companion.COMM
import dev.tpcomm.gpu.MockPlatform.Companion.dev
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import dev.tpcomm.gpu.sim.SimulatedWorld
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.longs.shouldBeGreaterThanOrEqual
import io.kotest.matchers.longs.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.types.shouldBeInstanceOf
import io.mockk.every
import io.mockk.verify
import kotlinx.coroutines.withTimeout
import kotlinx.serialization.builtins.serializer
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/**
 * The GPU engine's deadlines are the front's (CommunicatorFront, timed from the call on the core's
 * watchdog thread): every kind of operation, called as a user calls it, ends with
 * [CommunicationTimeoutException] about its timeout after the call, also when it waits for the
 * device's native thread, blocked in a library call, before it could start or even get its output.
 */
class NcclDeadlinesTest : FunSpec({
    /** Runs [block] and returns what it threw and how long it took, in milliseconds. */
    suspend fun timed(block: suspend () -> Unit): Pair<Throwable?, Long> {
        val start = System.nanoTime()
        val e = withTimeout(10.seconds) { runCatching { block() }.exceptionOrNull() }
        return e to (System.nanoTime() - start) / 1_000_000
    }

    test("simulator: a collective whose peer never arrives ends with CommunicationTimeoutException about the timeout after the call") {
        val platform = SimulatedGpuPlatform()
        val comms = SimulatedWorld(platform).connect(CommConfig(worldSize = 2, timeout = 500.milliseconds))
        try {
            // Rank 1 never calls.
            val (e, ms) = timed { comms[0].allReduce(platform.upload(Tensor.of(floatArrayOf(1f, 2f)), comms[0].device)) }
            e.shouldBeInstanceOf<CommunicationTimeoutException>()
            e.operation shouldBe "allReduce"
            e.message!! shouldContain "within 500ms"
            ms shouldBeGreaterThanOrEqual 500
            ms shouldBeLessThan 2_000
            comms[0].isAborted shouldBe true
            shouldThrow<CommunicatorAbortedException> { comms[0].barrier() }.cause shouldBe e
        } finally {
            comms.forEach { it.close() }
        }
    }

    test("simulator: an allocating collective and an object collective whose peer never arrives end at their deadline") {
        val platform = SimulatedGpuPlatform()
        val comms = SimulatedWorld(platform).connect(CommConfig(worldSize = 2, timeout = 500.milliseconds))
        val others = SimulatedWorld(platform).connect(CommConfig(worldSize = 2, timeout = 500.milliseconds))
        try {
            val (e, ms) = timed { comms[0].allGather(platform.upload(Tensor.of(floatArrayOf(1f, 2f)), comms[0].device)) }
            e.shouldBeInstanceOf<CommunicationTimeoutException>()
            e.operation shouldBe "allGather"
            ms shouldBeLessThan 2_000
            comms[0].flightRecorder.snapshot().single { it.operation == "allGather" }.state shouldBe FlightRecorder.State.Failed
            // The engine's own operation (recorded by the front with beginOwnCollective, no OperationCall).
            val (o, oms) = timed { others[0].allGatherObject("x", String.serializer()) }
            o.shouldBeInstanceOf<CommunicationTimeoutException>()
            o.operation shouldBe "allGatherObject"
            oms shouldBeLessThan 2_000
        } finally {
            (comms + others).forEach { it.close() }
        }
    }

    test("a point-to-point call queued behind another communicator's call blocked in the library is released at its deadline") {
        BlockedDevice().whileStuck(worldSize = 2, timeout = 500.milliseconds) { c ->
            val (e, ms) = timed { c.send(dev(A, DType.Float32, 4), 1) }
            e.shouldBeInstanceOf<CommunicationTimeoutException>()
            e.operation shouldBe "send"
            e.message!! shouldContain "did not start within 500ms"
            ms shouldBeLessThan 2_000 // its deadline is 0.5 s after the call; the thread is stuck for 3 s
            c.isAborted shouldBe true
        }
    }

    test("an allocating collective whose allocation waits behind another communicator's call blocked in the library is released at its deadline") {
        val d = BlockedDevice()
        d.whileStuck(worldSize = 1, timeout = 500.milliseconds) { c ->
            val (e, ms) = timed { c.allGather(dev(A, DType.Float32, 4)) }
            e.shouldBeInstanceOf<CommunicationTimeoutException>()
            e.operation shouldBe "allGather"
            e.message!! shouldContain "did not start within 500ms"
            ms shouldBeLessThan 2_000 // the native thread never took its allocation: it is stuck for 3 s
            c.flightRecorder.snapshot().single { it.operation == "allGather" }.state shouldBe FlightRecorder.State.Failed
            c.isAborted shouldBe true
        }
        verify(exactly = 0) { d.p.api.allGather(any(), any(), any(), any(), any(), any()) }
    }

    test("an allocating collective alone on a blocked device: its call is timed even before the engine reserved its place") {
        val p = MockPlatform()
        val c = p.connect(timeout = 300.milliseconds)
        val blocked = CountDownLatch(1)
        // The allocation itself is stuck in the driver (cudaMallocAsync never returns in time).
        every { p.runtime.mallocAsync(any(), any(), any()) } answers { blocked.countDown(); CountDownLatch(1).await(3, TimeUnit.SECONDS); firstArg<LongArray>()[0] = 0x7200_0000L; 0 }
        val (e, ms) = timed { c.allGather(dev(A, DType.Float32, 4)) }
        e.shouldBeInstanceOf<CommunicationTimeoutException>()
        e.operation shouldBe "allGather"
        ms shouldBeLessThan 2_000
        eventuallyVerified { verify(exactly = 1) { p.api.commAbort(COMM) } }
        c.close()
    }
})
