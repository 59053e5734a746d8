package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import dev.tpcomm.gpu.sim.SimulatedWorld
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.longs.shouldBeGreaterThanOrEqual
import io.kotest.matchers.longs.shouldBeLessThanOrEqual
import io.kotest.matchers.shouldBe
import kotlin.time.Duration.Companion.seconds

/**
 * Issue 34: device outputs come from a stream-ordered pool ([DeviceOutputPool]). Outputs of
 * repeating sizes reuse their blocks instead of a `cudaMallocAsync`/`cudaFreeAsync` pair per call,
 * and under budget pressure the pool's idle blocks are freed before anything fails.
 */
class DeviceOutputPoolSimTest : FunSpec({
    val config = CommConfig(timeout = 30.seconds)

    test("200 closed all-gathers of one size reuse their output's block: a handful of cudaMallocAsync calls, not 200") {
        val platform = SimulatedGpuPlatform()
        val sums = SimulatedWorld(platform).run(2, config) { c ->
            val input = platform.upload(Tensor.of(FloatArray(1024) { c.rank + 1f }), Device.Cuda(c.rank))
            var sum = 0.0
            repeat(200) { i ->
                c.allGather(input).use { out ->
                    if (i == 199) platform.download(out).use { h -> sum = (0 until 2048).sumOf { h.segment.getAtIndex(java.lang.foreign.ValueLayout.JAVA_FLOAT, it.toLong()).toDouble() } }
                }
            }
            c.barrier()
            sum
        }
        sums shouldBe listOf(3072.0, 3072.0) // the last output still holds both ranks' data: 1024 x 1 + 1024 x 2
        // One output block per rank, plus the barrier's scratch word per rank; before the pool: 200 per rank.
        platform.mallocAsyncCalls shouldBeLessThanOrEqual 8L
        platform.assertNoMisuse()
    }

    test("under budget pressure the pool's idle blocks are freed first: outputs of a new size fit where cached ones were") {
        val capacity = 32L shl 20
        val platform = SimulatedGpuPlatform(deviceMemoryBytes = capacity)
        val outcomes = SimulatedWorld(platform).run(2, config) { c ->
            val small = platform.upload(Tensor.zeros(DType.Float32, 262_144), Device.Cuda(c.rank)) // 2 MiB outputs
            val large = platform.upload(Tensor.zeros(DType.Float32, 524_288), Device.Cuda(c.rank)) // 4 MiB outputs
            // 24 MiB of 2 MiB outputs, all closed: the pool caches their blocks, counted in the budget (about 26 MiB).
            List(12) { c.allGather(small) }.forEach { it.close() }
            c.barrier()
            platform.deviceBytesInUse(c.rank) shouldBeGreaterThanOrEqual (27L shl 20) // inputs and the cached blocks
            val before = platform.mallocAsyncCalls
            // 24 MiB of 4 MiB outputs kept alive: they fit only once the cached 2 MiB blocks are freed.
            val kept = List(6) { c.allGather(large) }
            c.barrier()
            val took = platform.mallocAsyncCalls - before
            kept.forEach { it.close() }
            took
        }
        outcomes.forEach { it shouldBeLessThanOrEqual 14L } // the 6 large outputs per rank (both ranks counted), nothing failed
        platform.assertNoMisuse()
    }

    test("a device full below the budget (cudaErrorMemoryAllocation) frees the pool's idle blocks and retries before failing") {
        val platform = SimulatedGpuPlatform(deviceMemoryBytes = 32L shl 20)
        System.setProperty(DeviceMemoryBudgetSettings.PROPERTY, "unlimited")
        try {
            SimulatedWorld(platform).run(2, config) { c ->
                val small = platform.upload(Tensor.zeros(DType.Float32, 262_144), Device.Cuda(c.rank))
                val large = platform.upload(Tensor.zeros(DType.Float32, 524_288), Device.Cuda(c.rank))
                List(13) { c.allGather(small) }.forEach { it.close() } // 26 MiB cached of a 32 MiB device
                val kept = List(6) { c.allGather(large) } // 24 MiB: only where the cached blocks were
                c.barrier()
                kept.forEach { it.close() }
            }
        } finally {
            System.clearProperty(DeviceMemoryBudgetSettings.PROPERTY)
        }
        platform.assertNoMisuse()
    }
})
