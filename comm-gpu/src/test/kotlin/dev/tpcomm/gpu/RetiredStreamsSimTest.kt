package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import dev.tpcomm.gpu.sim.SimulatedWorld
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.ints.shouldBeLessThanOrEqual
import kotlin.time.Duration.Companion.seconds

/**
 * Issue 34: the stream of a closed communicator is destroyed once nothing can still target it, not
 * when the device's last communicator closes, so a process that keeps a parent open and makes and
 * closes sub-communicators does not accumulate streams.
 */
class RetiredStreamsSimTest : FunSpec({
    val config = CommConfig(timeout = 30.seconds)

    /** Waits up to 5 s for [platform]'s live streams to fall to [bound] or below, and returns the count. */
    fun settled(platform: SimulatedGpuPlatform, bound: Int): Int {
        val deadline = System.nanoTime() + 5_000_000_000L
        while (platform.liveStreams > bound && System.nanoTime() < deadline) Thread.sleep(5)
        return platform.liveStreams
    }

    test("30 sub-communicators made and closed under an open parent leave a bounded number of streams") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(2, config) { c ->
            val input = platform.upload(Tensor.zeros(DType.Float32, 256), Device.Cuda(c.rank))
            repeat(30) {
                val sub = c.split(0)!!
                sub.allGather(input).close()
                sub.close()
            }
            c.barrier()
            // The parents' two streams, and at most the last retired stream of each rank not destroyed yet.
            if (c.rank == 0) settled(platform, 4) shouldBeLessThanOrEqual 4
            c.barrier()
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
            kept.forEach { it.close() } // each frees on its closed communicator's stream, the last use of it
            c.split(0)!!.close() // a later close on the device's thread destroys what retired before
            c.barrier()
            if (c.rank == 0) settled(platform, 4) shouldBeLessThanOrEqual 4
            c.barrier()
        }
        platform.assertNoMisuse()
    }
})
