package dev.tpcomm.nccl

import dev.tpcomm.BackendUnavailableException
import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain

/**
 * On this machine (no NVIDIA driver, no NCCL) the factory must say so: unavailable, with the cause
 * and how to install, and `create` throwing [BackendUnavailableException].
 */
class NcclBackendFactoryTest : FunSpec({
    test("found by ServiceLoader as nccl with priority 100") {
        val f = Comm.backends().single { it.name == "nccl" }
        f.priority shouldBe 100
        f.javaClass shouldBe NcclBackendFactory::class.java
    }

    test("unavailable here, naming the missing library and how to install it") {
        val f = NcclBackendFactory()
        f.isAvailable() shouldBe false
        val reason = f.unavailableReason()!!
        reason shouldContain "UnsatisfiedLinkError"
        reason shouldContain "Install the NVIDIA driver"
        reason shouldContain "cuda-redist"
    }

    test("a CUDA 12 driver (cudaErrorInsufficientDriver) or a missing libcudart.so.13 says what to install or override") {
        // The preset's libjnicudart.so links libcudart.so.13: under an R570 driver it loads and cudaGetDeviceCount returns 35.
        val old = NcclBackendFactory.cuda13Advice(null, 35)!!
        old shouldContain "R580"
        old shouldContain "CUDA 12 preset"
        old shouldContain "driver is older"
        val missing = NcclBackendFactory.unavailable(
            UnsatisfiedLinkError("/root/.javacpp/cache/libjnicudart.so: libcudart.so.13: cannot open shared object file: No such file or directory"),
        ).reason!!
        missing shouldContain "libcudart.so.13) is not on the loader path"
        missing shouldContain "nvidia-cuda-runtime-cu13"
        NcclBackendFactory.cuda13Advice("libnccl.so.2: cannot open shared object file", 100) shouldBe null
    }

    test("create throws BackendUnavailableException with that reason") {
        val f = NcclBackendFactory()
        val e = shouldThrow<BackendUnavailableException> { f.create(CommConfig()) }
        e.backend shouldBe "nccl"
        e.message!! shouldContain "NCCL or the CUDA runtime could not be loaded"
        shouldThrow<BackendUnavailableException> { Comm.create("nccl", CommConfig()) }
    }

    test("bad nccl.* options are refused before anything loads") {
        shouldThrow<IllegalArgumentException> { NcclBackendFactory().create(CommConfig(options = mapOf("nccl.minChannels" to "x"))) }
            .message shouldContain "must be an integer"
    }
})
