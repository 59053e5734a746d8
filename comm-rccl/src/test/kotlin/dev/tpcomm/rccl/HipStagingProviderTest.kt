package dev.tpcomm.rccl

import dev.tpcomm.Device
import dev.tpcomm.nccl.CudaStagingProvider
import dev.tpcomm.spi.DeviceStagingRegistry
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.string.shouldNotContain

/** On this machine (no ROCm, no JavaCPP jars) both staging providers are found, offer nothing and say why. */
class HipStagingProviderTest : FunSpec({
    test("the HIP and CUDA staging providers are found by ServiceLoader; neither is available here, each says why") {
        DeviceStagingRegistry.find(Device.Rocm(0)) shouldBe null
        DeviceStagingRegistry.find(Device.Cuda(0)) shouldBe null
        val notes = DeviceStagingRegistry.unavailable
        val hip = notes.single { it.startsWith(HipStagingProvider::class.java.name) }
        hip shouldContain "HIP staging is not available"
        hip shouldContain "libamdhip64.so"
        val cuda = notes.single { it.startsWith(CudaStagingProvider::class.java.name) }
        cuda shouldContain "JavaCPP CUDA presets are not on the classpath"
        shouldThrow<IllegalStateException> { HipStagingProvider().create() }
        System.getProperty("java.class.path").lowercase() shouldNotContain "bytedeco"
    }
})
