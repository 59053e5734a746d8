package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.MonitoredBarrierException
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import dev.tpcomm.gpu.sim.SimulatedWorld
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainExactly
import io.kotest.matchers.longs.shouldBeLessThan
import io.kotest.matchers.nulls.shouldBeNull
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.types.shouldBeInstanceOf
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.supervisorScope
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/** [dev.tpcomm.Communicator.monitoredBarrier] on the GPU engine over the simulated NCCL platform. */
class NcclMonitoredBarrierSimTest : FunSpec({
    test("every rank arrives: 20 monitored barriers between all-reduces pass on every rank") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(3, CommConfig(timeout = 10.seconds)) { c ->
            repeat(20) {
                c.monitoredBarrier(4.seconds, waitAllRanks = it % 2 == 0)
                val t = platform.upload(Tensor.of(floatArrayOf(1f)), c.device)
                platform.download(c.allReduce(t)).toFloatArray()[0] shouldBe 3f
            }
        }
        platform.assertNoMisuse()
    }

    test("rank 2 of 4 never calls: rank 0 names it (rank 3 unchecked), every other rank ends with a named exception, the communicator is aborted") {
        val platform = SimulatedGpuPlatform()
        val timeout = 800.milliseconds
        val comms = SimulatedWorld(platform).connect(CommConfig(worldSize = 4, timeout = 10.seconds))
        try {
            val start = System.nanoTime()
            val outcomes = supervisorScope {
                comms.filter { it.rank != 2 }.map { c ->
                    async(Dispatchers.Default) {
                        val t0 = System.nanoTime()
                        val e = runCatching { c.monitoredBarrier(timeout) }.exceptionOrNull()
                        c.rank to (e to (System.nanoTime() - t0) / 1_000_000)
                    }
                }.awaitAll()
            }.toMap()
            val (root, rootMillis) = outcomes.getValue(0)
            val e = root.shouldBeInstanceOf<MonitoredBarrierException>()
            e.missingRanks shouldContainExactly listOf(2)
            e.message shouldContain "rank 2 did not reach monitoredBarrier within $timeout"
            e.message shouldContain "rank 3 not checked"
            rootMillis shouldBeLessThan (timeout + 500.milliseconds).inWholeMilliseconds
            for (r in listOf(1, 3)) {
                withClue("rank $r") {
                    val (err, millis) = outcomes.getValue(r)
                    // Rank 0 aborted before it could answer (its receive from rank 2 held the device's thread):
                    // the others end by their own deadline, twice the timeout, naming rank 0 as unanswering.
                    err.shouldBeInstanceOf<MonitoredBarrierException>().message shouldContain "rank 0 did not answer monitoredBarrier"
                    millis shouldBeLessThan (timeout * 2 + 1.seconds).inWholeMilliseconds
                }
            }
            shouldThrow<CommunicatorAbortedException> { comms[0].allReduce(platform.upload(Tensor.of(floatArrayOf(1f)), comms[0].device)) }
            ((System.nanoTime() - start) / 1_000_000) shouldBeLessThan 5_000L
        } finally {
            comms.forEach { it.close() }
        }
    }

    test("a timeout that is not positive is refused before anything is issued") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(2, CommConfig(timeout = 5.seconds)) { c ->
            shouldThrow<IllegalArgumentException> { c.monitoredBarrier((-1).seconds) }.message shouldContain "must be positive"
            runCatching { c.monitoredBarrier(2.seconds) }.exceptionOrNull().shouldBeNull()
        }
    }
})
