@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.MockPlatform.Companion.A
import dev.tpcomm.gpu.MockPlatform.Companion.COMM
import dev.tpcomm.gpu.MockPlatform.Companion.STREAM
import dev.tpcomm.gpu.MockPlatform.Companion.TEMP_BASE
import dev.tpcomm.gpu.MockPlatform.Companion.dev
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.mockk.every
import io.mockk.verify
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.matchers.collections.shouldContain
import io.kotest.matchers.string.shouldContain
import dev.tpcomm.CollectiveMismatchException
import java.lang.foreign.MemorySegment
import io.mockk.verifyOrder
import kotlin.time.Duration.Companion.seconds

class ConsistencyAndCopiesTest : FunSpec({
    test("with checkConsistency each collective first all-gathers a 128-byte signature (the core's CollectiveSignature) staged through device memory") {
        val p = MockPlatform()
        val c = NcclConnector.connect(
            p.api, p.runtime, Device.Cuda(0), CommConfig(worldSize = 2, rank = 1, timeout = 5.seconds, checkConsistency = true),
            { _, _ -> ByteArray(NcclConnector.UNIQUE_ID_BYTES) }, "nccl",
        )
        // The mock moves no data: make the "gathered" block hold this rank's signature in rank 0's slot too.
        every { p.runtime.memcpyAsync(any(), any(), 256, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, any()) } answers {
            val host = MemorySegment.ofAddress(firstArg<Long>()).reinterpret(256)
            MemorySegment.copy(host, 128, host, 0, 128)
            0
        }
        c.allReduce(dev(A, DType.Float32, 3))
        verifyOrder {
            p.runtime.hostAlloc(any(), 256) // page-locked staging: the device-to-host copy never blocks the native thread
            p.runtime.mallocAsync(any(), 256, STREAM)
            p.runtime.memcpyAsync(TEMP_BASE + 128, any(), 128, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, STREAM)
            p.api.allGather(TEMP_BASE + 128, TEMP_BASE, 128, NcclDataType.UINT8, COMM, STREAM)
            p.runtime.memcpyAsync(any(), TEMP_BASE, 256, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, STREAM)
            p.api.allReduce(A, A, 3, NcclDataType.FLOAT32, NcclRedOp.SUM, COMM, STREAM)
        }
        verify(exactly = 0) { p.runtime.free(any()) }
        c.close()
        // The staging buffer is freed after the stream's last work, on the thread close started for it.
        verify(timeout = 5_000) { p.runtime.freeHost(any()) }
        // Rank 0's slot left as zeros: a mismatch naming rank 1 and the differing fields, and the communicator aborts.
        val m = MockPlatform()
        val mc = NcclConnector.connect(
            m.api, m.runtime, Device.Cuda(0), CommConfig(worldSize = 2, rank = 1, timeout = 5.seconds, checkConsistency = true),
            { _, _ -> ByteArray(NcclConnector.UNIQUE_ID_BYTES) }, "nccl",
        )
        val e = shouldThrow<CollectiveMismatchException> { mc.allReduce(dev(A, DType.Float32, 3)) }
        e.ranks shouldBe listOf(1)
        e.fields shouldContain "protocol" // rank 0's words are zeros: not a tpcomm signature of this version
        e.message!! shouldContain "rank 1 called allReduce(Float32[3], op=Sum)"
        verify(exactly = 0) { m.api.allReduce(any(), any(), any(), any(), any(), any(), any()) }
        verify { m.api.commAbort(COMM) }
        val q = MockPlatform()
        val unchecked = q.connect(worldSize = 2, rank = 1)
        unchecked.allReduce(dev(A, DType.Float32, 3))
        verify(exactly = 0) { q.api.allGather(any(), any(), any(), any(), any(), any()) }
        unchecked.close()
    }

    test("DeviceCopies round-trips a tensor through device memory") {
        SimulatedGpuPlatform().use { platform ->
            val copies = DeviceCopies(platform.runtime, Device.Cuda(3))
            val host = Tensor.of(doubleArrayOf(1.5, -2.0, 3.25), 3)
            val d = copies.upload(host)
            d.device shouldBe Device.Cuda(3)
            d.shape shouldBe listOf(3)
            copies.download(d).toDoubleArray().toList() shouldBe listOf(1.5, -2.0, 3.25)
            copies.download(host) shouldBe host
        }
    }

    test("DeviceCopies: close() frees an upload at once, with the free that pairs with its allocation") {
        SimulatedGpuPlatform().use { platform ->
            val copies = DeviceCopies(platform.runtime, Device.Cuda(2))
            val before = platform.liveAllocations
            val d = copies.upload(Tensor.of(doubleArrayOf(1.0, 2.0), 2))
            platform.liveAllocations shouldBe before + 1
            d.close()
            d.close() // once: a second close frees nothing
            val deadline = System.nanoTime() + 5_000_000_000L
            while (platform.liveAllocations > before && System.nanoTime() < deadline) Thread.sleep(5) // the legacy stream runs the free
            platform.liveAllocations shouldBe before
            platform.assertNoMisuse()
        }
    }
})
