package dev.tpcomm.gpu

import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import dev.tpcomm.spi.DeviceStagingRegistry
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContain
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.mockk.every
import io.mockk.mockk
import io.mockk.verify
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.util.concurrent.Executors
import java.util.concurrent.TimeUnit
import kotlin.random.Random

/**
 * [DeviceRuntimeStaging] against the simulated platform (exact bytes both ways, runtime error codes
 * to exceptions) and against a MockK runtime (the calls it makes, stream reuse, failure paths,
 * close), and [CudaStagingProvider] on this GPU-less machine.
 */
class DeviceRuntimeStagingTest : FunSpec({
    fun bytes(n: Int, seed: Int): MemorySegment = Arena.ofAuto().allocate(n.toLong(), 16).also {
        it.copyFrom(MemorySegment.ofArray(Random(seed).nextBytes(n)))
    }

    test("simulated platform: device -> host -> device round trip gives the exact bytes, whole and in slices") {
        SimulatedGpuPlatform().use { platform ->
            DeviceRuntimeStaging.cuda(platform.runtime).use { staging ->
                val n = 4099
                val original = bytes(n, 1)
                val device = platform.upload(Tensor.wrap(original, DType.UInt8, n), Device.Cuda(3))
                val host = Arena.ofAuto().allocate(n.toLong())
                staging.copyToHost(Device.Cuda(3), device.address, host, n.toLong())
                host.mismatch(original) shouldBe -1L
                val replacement = bytes(n, 2)
                staging.copyToDevice(Device.Cuda(3), replacement, device.address, n.toLong())
                platform.download(device).segment.mismatch(replacement) shouldBe -1L
                // A slice in the middle of the allocation, from the middle of a host segment.
                val patch = bytes(100, 3)
                staging.copyToDevice(Device.Cuda(3), patch, device.address + 1000, 100)
                val back = Arena.ofAuto().allocate(300)
                staging.copyToHost(Device.Cuda(3), device.address + 900, back, 300)
                back.asSlice(0, 100).mismatch(replacement.asSlice(900, 100)) shouldBe -1L
                back.asSlice(100, 100).mismatch(patch) shouldBe -1L
                back.asSlice(200, 100).mismatch(replacement.asSlice(1100, 100)) shouldBe -1L
                staging.name shouldBe "simulated GPU runtime runtime staging"
            }
        }
    }

    test("simulated platform: copies from many threads to two devices are all exact") {
        SimulatedGpuPlatform().use { platform ->
            DeviceRuntimeStaging(platform.runtime) { it.isGpu }.use { staging ->
                val pool = Executors.newFixedThreadPool(4)
                val tasks = (0 until 16).map { i ->
                    pool.submit<Boolean> {
                        val device = if (i % 2 == 0) Device.Cuda(0) else Device.Rocm(1)
                        val original = bytes(1000 + i, 100 + i)
                        val t = platform.upload(Tensor.wrap(original, DType.UInt8, 1000 + i), device)
                        val host = Arena.ofAuto().allocate(1000L + i)
                        repeat(5) { staging.copyToHost(device, t.address, host, 1000L + i) }
                        host.mismatch(original) == -1L
                    }
                }
                tasks.map { it.get(60, TimeUnit.SECONDS) } shouldBe List(16) { true }
                pool.shutdown()
            }
        }
    }

    test("simulated platform: runtime error codes become IllegalStateException with the call and getErrorString") {
        SimulatedGpuPlatform(deviceCount = 2).use { platform ->
            DeviceRuntimeStaging.cuda(platform.runtime).use { staging ->
                val device = platform.upload(Tensor.of(floatArrayOf(1f, 2f)), Device.Cuda(0))
                val host = Arena.ofAuto().allocate(64)
                val outside = shouldThrow<IllegalStateException> { staging.copyToHost(Device.Cuda(0), device.address, host, 64) }
                outside.message shouldBe "simulated GPU runtime memcpyAsync (device to host, 64 bytes) on device 0 failed with error 1: invalid argument (simulated)"
                val badDevice = shouldThrow<IllegalStateException> { staging.copyToDevice(Device.Cuda(5), host, device.address, 8) }
                badDevice.message shouldBe "simulated GPU runtime setDevice on device 5 failed with error 101: invalid device ordinal (simulated)"
                // The stream survives a refused copy.
                staging.copyToHost(Device.Cuda(0), device.address, host, 8)
                host.asSlice(0, 8).toArray(java.lang.foreign.ValueLayout.JAVA_FLOAT).toList() shouldBe listOf(1f, 2f)
            }
        }
    }

    test("bad arguments are refused before any runtime call") {
        val runtime = mockk<DeviceRuntime>()
        every { runtime.platformName } returns "CUDA"
        val staging = DeviceRuntimeStaging.cuda(runtime)
        val host = Arena.ofAuto().allocate(16)
        shouldThrow<IllegalArgumentException> { staging.copyToHost(Device.Rocm(0), 0x1000, host, 16) }.message shouldContain "does not copy for Rocm(index=0)"
        shouldThrow<IllegalArgumentException> { staging.copyToHost(Device.Cuda(0), 0x1000, host, -1) }.message shouldContain "negative"
        shouldThrow<IllegalArgumentException> { staging.copyToHost(Device.Cuda(0), 0x1000, host, 17) }.message shouldContain "fewer than the 17"
        shouldThrow<IllegalArgumentException> { staging.copyToDevice(Device.Cuda(0), MemorySegment.ofArray(ByteArray(16)), 0x1000, 16) }.message shouldContain "heap segment"
        staging.copyToHost(Device.Cuda(0), 0x1000, host, 0) // nothing to copy: no runtime call
        verify(exactly = 0) { runtime.setDevice(any()) }
        staging.accepts(Device.Cuda(2)) shouldBe true
        staging.accepts(Device.Host) shouldBe false
        DeviceRuntimeStaging.rocm(runtime).accepts(Device.Rocm(0)) shouldBe true
        DeviceRuntimeStaging.rocm(runtime).accepts(Device.Cuda(0)) shouldBe false
    }

    fun okRuntime(): DeviceRuntime = mockk<DeviceRuntime>().also { r ->
        var next = 0x100L
        every { r.platformName } returns "CUDA"
        every { r.setDevice(any()) } returns 0
        every { r.streamCreateNonBlocking(any()) } answers { firstArg<LongArray>()[0] = next++; 0 }
        every { r.eventCreateDisableTiming(any()) } answers { firstArg<LongArray>()[0] = next++; 0 }
        every { r.memcpyAsync(any(), any(), any(), any(), any()) } returns 0
        every { r.eventRecord(any(), any()) } returns 0
        every { r.eventSynchronize(any()) } returns 0
        every { r.streamDestroy(any()) } returns 0
        every { r.eventDestroy(any()) } returns 0
        every { r.getErrorString(any()) } answers { "error string ${firstArg<Int>()}" }
    }

    test("one stream and event per device, reused; the copy is ordered memcpy, record, synchronize; close destroys them once") {
        val r = okRuntime()
        val staging = DeviceRuntimeStaging.cuda(r)
        val host = Arena.ofAuto().allocate(64)
        repeat(3) { staging.copyToHost(Device.Cuda(1), 0xA000, host, 64) }
        staging.copyToDevice(Device.Cuda(2), host, 0xB000, 32)
        verify(exactly = 2) { r.streamCreateNonBlocking(any()) }
        verify(exactly = 3) { r.memcpyAsync(host.address(), 0xA000, 64, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, 0x100) }
        verify(exactly = 3) { r.eventRecord(0x101, 0x100) }
        verify(exactly = 3) { r.eventSynchronize(0x101) }
        verify(exactly = 1) { r.memcpyAsync(0xB000, host.address(), 32, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, 0x102) }
        verify(exactly = 3) { r.setDevice(1) }
        staging.close()
        staging.close()
        verify(exactly = 1) { r.streamDestroy(0x100) }
        verify(exactly = 1) { r.eventDestroy(0x101) }
        verify(exactly = 1) { r.streamDestroy(0x102) }
        verify(exactly = 1) { r.eventDestroy(0x103) }
        shouldThrow<IllegalStateException> { staging.copyToHost(Device.Cuda(1), 0xA000, host, 64) }.message shouldContain "is closed"
    }

    test("a failed synchronize reports the error string; the next copy uses the same stream") {
        val r = okRuntime()
        every { r.eventSynchronize(any()) } returnsMany listOf(700, 0)
        val staging = DeviceRuntimeStaging.cuda(r)
        val host = Arena.ofAuto().allocate(8)
        val e = shouldThrow<IllegalStateException> { staging.copyToDevice(Device.Cuda(0), host, 0xA000, 8) }
        e.message shouldBe "CUDA eventSynchronize (waiting for the host to device copy) on device 0 failed with error 700: error string 700"
        staging.copyToDevice(Device.Cuda(0), host, 0xA000, 8)
        verify(exactly = 1) { r.streamCreateNonBlocking(any()) }
    }

    test("a failed stream or event creation is reported, leaks nothing, and is retried by the next copy") {
        val r = okRuntime()
        every { r.streamCreateNonBlocking(any()) } returnsMany listOf(2, 0) andThenAnswer { 0 }
        val staging = DeviceRuntimeStaging.cuda(r)
        val host = Arena.ofAuto().allocate(8)
        shouldThrow<IllegalStateException> { staging.copyToHost(Device.Cuda(0), 0xA000, host, 8) }.message shouldBe
            "CUDA streamCreateWithFlags on device 0 failed with error 2: error string 2"
        every { r.eventCreateDisableTiming(any()) } returns 2
        every { r.streamCreateNonBlocking(any()) } answers { firstArg<LongArray>()[0] = 0x900; 0 }
        shouldThrow<IllegalStateException> { staging.copyToHost(Device.Cuda(0), 0xA000, host, 8) }.message shouldContain "eventCreateWithFlags"
        verify(exactly = 1) { r.streamDestroy(0x900) }
        verify(exactly = 0) { r.memcpyAsync(any(), any(), any(), any(), any()) }
        every { r.eventCreateDisableTiming(any()) } answers { firstArg<LongArray>()[0] = 0x901; 0 }
        staging.copyToHost(Device.Cuda(0), 0xA000, host, 8)
        verify(exactly = 1) { r.memcpyAsync(host.address(), 0xA000, 8, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, 0x900) }
    }

    test("a failing memcpy reports the direction and size") {
        val r = okRuntime()
        every { r.memcpyAsync(any(), any(), any(), any(), any()) } returns 1
        val staging = DeviceRuntimeStaging.cuda(r)
        shouldThrow<IllegalStateException> { staging.copyToHost(Device.Cuda(0), 0xA000, Arena.ofAuto().allocate(8), 8) }.message shouldBe
            "CUDA memcpyAsync (device to host, 8 bytes) on device 0 failed with error 1: error string 1"
        verify(exactly = 0) { r.eventSynchronize(any()) }
    }
})
