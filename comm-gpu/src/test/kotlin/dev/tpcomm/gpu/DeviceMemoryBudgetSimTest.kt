package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.NativeMemoryBudgetException
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import dev.tpcomm.gpu.sim.SimulatedWorld
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import kotlin.time.Duration.Companion.seconds

/**
 * Issue 34, device half: all-gather loops on simulated devices of small capacity (32 MiB; each
 * output 2 MiB, world of 2, so 16 outputs fill a device). The simulator refuses an allocation past
 * the capacity with `cudaErrorMemoryAllocation`, as the real runtime does.
 */
class DeviceMemoryBudgetSimTest : FunSpec({
    val config = CommConfig(timeout = 30.seconds)
    val capacity = 32L shl 20
    val elements = 262_144 // 1 MiB of Float32 per rank: a 2 MiB output

    test("closed all-gather outputs are freed at close: 300 iterations on a 32 MiB device") {
        val platform = SimulatedGpuPlatform(deviceMemoryBytes = capacity)
        SimulatedWorld(platform).run(2, config) { c ->
            val input = platform.upload(Tensor.zeros(DType.Float32, elements), Device.Cuda(c.rank))
            repeat(300) { c.allGather(input).close() }
            c.barrier()
        }
        platform.assertNoMisuse()
    }

    test("forgotten all-gather outputs are reclaimed or fail with the device budget, never an abort") {
        val platform = SimulatedGpuPlatform(deviceMemoryBytes = capacity)
        val outcomes = SimulatedWorld(platform).run(2, config) { c ->
            val input = platform.upload(Tensor.zeros(DType.Float32, elements), Device.Cuda(c.rank))
            try {
                repeat(200) { c.allGather(input) } // outputs never closed, unreachable at once
                "completed"
            } catch (e: NativeMemoryBudgetException) {
                "budget: ${e.message}"
            } catch (e: CommunicationException) {
                // The peer of a rank that failed at its budget cannot finish that collective.
                if (e.cause is NativeMemoryBudgetException || e.message?.contains("budget") == true) "peer of budget failure" else throw e
            }
        }
        outcomes.forEach { o -> if (o.startsWith("budget")) o shouldContain "device memory budget" }
        outcomes shouldBe listOf("completed", "completed")
        platform.assertNoMisuse()
    }

    test("outputs kept reachable fail at the device budget with NativeMemoryBudgetException naming it and the fixes") {
        val platform = SimulatedGpuPlatform(deviceMemoryBytes = capacity)
        val messages = SimulatedWorld(platform).run(2, config) { c ->
            val input = platform.upload(Tensor.zeros(DType.Float32, elements), Device.Cuda(c.rank))
            val kept = ArrayList<Tensor>()
            try {
                repeat(100) { kept += c.allGather(input) }
                "no failure"
            } catch (e: NativeMemoryBudgetException) {
                e.heldBytes shouldBe kept.size * 2L * (elements * 4L)
                e.message!!
            }
        }
        messages.forEach { m ->
            m shouldContain "device memory budget"
            m shouldContain "close the output tensors"
            m shouldContain DeviceMemoryBudgetSettings.PROPERTY
        }
        platform.assertNoMisuse()
    }

    test("the device budget's settings: a size, a percentage of the free memory, the default, a bad value") {
        DeviceMemoryBudgetSettings.resolve("1g", null, 10L shl 30).limit shouldBe (1L shl 30)
        DeviceMemoryBudgetSettings.resolve(null, "50%", 10L shl 30).limit shouldBe (5L shl 30)
        DeviceMemoryBudgetSettings.resolve(null, null, 10L shl 30).limit shouldBe (9L shl 30)
        DeviceMemoryBudgetSettings.resolve(null, null, null).limit shouldBe Long.MAX_VALUE
        DeviceMemoryBudgetSettings.resolve("lots", null, 10L shl 30).configError!! shouldContain "not a memory size"
    }

    test("page-locked staging is freed at close off the device's native thread (cudaFreeHost synchronises the device)") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(2, config) { c ->
            c.allGatherObject("rank-${c.rank}", kotlinx.serialization.serializer<String>()) shouldBe listOf("rank-0", "rank-1")
        }
        val deadline = System.nanoTime() + 5_000_000_000L
        while (platform.livePinnedAllocations > 0 && System.nanoTime() < deadline) Thread.sleep(5)
        platform.livePinnedAllocations shouldBe 0
        platform.pinnedFreeThreads.isEmpty() shouldBe false
        platform.pinnedFreeThreads.filter { it.startsWith("tpcomm-nccl-device") } shouldBe emptyList()
        platform.assertNoMisuse()
    }
})
