package dev.tpcomm.rccl

import dev.tpcomm.gpu.DeviceRuntime
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldBeIn
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.io.File

/**
 * The CUDA dialect of the `java.lang.foreign` runtime binding against the real CUDA runtime. This
 * machine kind has the CUDA 13.0 toolkit (`/usr/local/cuda/lib64/libcudart.so.13`) and no NVIDIA
 * driver (../shared/notes/gpu-bindings.md), so every one of the 20 symbols is resolved in the real
 * library and the calls that need no device run; where the toolkit is absent the test says so and
 * passes nothing off as checked.
 */
class FfmDeviceRuntimeTest : FunSpec({
    val cudart = File("/usr/local/cuda/lib64/libcudart.so.13")

    test("the CUDA dialect resolves every symbol in libcudart.so.13 and its calls reach the real runtime").config(enabled = cudart.exists()) {
        val runtime = FfmDeviceRuntime(NativeLibrary.open("the CUDA runtime", cudart.path), FfmDeviceRuntime.CUDA)
        runtime.platformName shouldBe "CUDA"
        // CUDA 13.0 driver_types.h: cudaErrorNotReady = 600, and cudaGetErrorString's text for it.
        runtime.getErrorString(DeviceRuntime.ERROR_NOT_READY) shouldContain "not ready"
        val count = IntArray(1)
        val rc = runtime.getDeviceCount(count)
        if (File("/dev/nvidia0").exists()) {
            rc shouldBe DeviceRuntime.SUCCESS
        } else {
            // No driver: cudaErrorInsufficientDriver (35) or cudaErrorNoDevice (100), driver_types.h 399 and 530.
            rc shouldBeIn listOf(35, 100)
            count[0] shouldBe 0
            runtime.getErrorString(rc).isNotBlank() shouldBe true
        }
    }

    test("the CUDA runtime is found from the usual places when the toolkit is installed").config(enabled = cudart.exists()) {
        FfmDeviceRuntime.cuda().loadedFrom shouldContain "libcudart.so"
    }

    test("an NCCL library that is not there fails to open with every place it tried") {
        val e = runCatching { RcclLibrary(NativeLibrary("NCCL (libnccl.so.2)", listOf("/nonexistent/libnccl.so.2")), "NCCL") }.exceptionOrNull()
        (e is UnsatisfiedLinkError) shouldBe true
        e!!.message!! shouldContain "/nonexistent/libnccl.so.2"
    }
})
