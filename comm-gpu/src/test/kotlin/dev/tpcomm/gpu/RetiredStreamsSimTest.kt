package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import dev.tpcomm.gpu.sim.SimulatedWorld
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.ints.shouldBeLessThanOrEqual
import io.kotest.matchers.shouldBe
import kotlin.time.Duration.Companion.seconds

/**
 * Issue 34: the stream of a closed communicator is destroyed once nothing can still target it, not
 * when the device's last communicator closes, so a process that keeps a parent open and makes and
 * closes sub-communicators does not accumulate streams.
 *
 * What the engine guarantees, and all these tests assert: a retired stream is destroyed at the first
 * turn of its device's thread that touches memory (an output's allocation or free, a communicator's
 * close; [RetiredStreams.reap]) once the event recorded after its last work completed, and not by any
 * timer. A stream whose last work is still running at a turn (the simulated stream threads run late
 * on a loaded machine) stays until the next turn after it finished, so the tests wait for the
 * device's streams to be idle ([SimulatedGpuPlatform.awaitStreamsIdle]) before the turn whose
 * effect they count, and count per device, on the rank that owns it.
 */
class RetiredStreamsSimTest : FunSpec({
    val config = CommConfig(timeout = 30.seconds)

    test("30 sub-communicators made and closed under an open parent leave a bounded number of streams") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(2, config) { c ->
            val input = platform.upload(Tensor.zeros(DType.Float32, 256), Device.Cuda(c.rank))
            repeat(30) {
                val sub = c.split(0)!!
                sub.allGather(input).close() // its allocation is a turn: the previous sub's stream, idle, is destroyed
                sub.close()
                platform.awaitStreamsIdle(c.rank)
                // The parent's stream, and at most this sub's, retired at its close (its event may not have completed at that turn).
                platform.liveStreams(c.rank) shouldBeLessThanOrEqual 2
            }
            c.allGather(input).close() // a turn after the last sub's stream went idle, creating no stream
            platform.liveStreams(c.rank) shouldBe 1
        }
        platform.assertNoMisuse()
    }

    test("an output that outlives its sub-communicator is freed on that stream when closed; then the stream is destroyed") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(2, config) { c ->
            val input = platform.upload(Tensor.zeros(DType.Float32, 256), Device.Cuda(c.rank))
            val kept = List(5) {
                val sub = c.split(0)!!
                val out = sub.allGather(input)
                sub.close()
                out
            }
            c.barrier()
            // Closed communicators whose outputs are alive keep their streams: nothing is destroyed yet.
            platform.liveStreams(c.rank) shouldBe 6
            kept.forEach { it.close() } // each frees on its closed communicator's stream, the last use of it
            c.barrier() // the device's thread issued those frees (queued before the barrier) and each stream's retirement event
            platform.awaitStreamsIdle(c.rank) // the frees, the streams' last work, are done
            c.split(0)!!.close() // a later close on the device's thread destroys what retired before
            // The parent's stream, and at most the split's own, retired at that close (its event may not have completed then).
            platform.liveStreams(c.rank) shouldBeLessThanOrEqual 2
            platform.awaitStreamsIdle(c.rank)
            c.allGather(input).close() // the next turn, creating no stream, destroys that one too
            platform.liveStreams(c.rank) shouldBe 1
        }
        platform.assertNoMisuse()
    }
})
