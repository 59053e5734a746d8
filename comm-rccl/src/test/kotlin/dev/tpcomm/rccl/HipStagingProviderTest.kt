package dev.tpcomm.rccl

import dev.tpcomm.Device
import dev.tpcomm.spi.DeviceStagingRegistry
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.string.shouldNotContain

/** On this machine (no ROCm) the HIP staging provider is found, offers nothing and says why; comm-nccl's CUDA provider is not on comm-rccl's classpath. */
class HipStagingProviderTest : FunSpec({
    test("the HIP staging provider is found by ServiceLoader, is not available here, and says why") {
        DeviceStagingRegistry.find(Device.Rocm(0)) shouldBe null
        DeviceStagingRegistry.find(Device.Cuda(0)) shouldBe null
        val notes = DeviceStagingRegistry.unavailable
        val hip = notes.single { it.startsWith(HipStagingProvider::class.java.name) }
        hip shouldContain "HIP staging is not available"
        hip shouldContain "libamdhip64.so"
        notes.none { it.startsWith("dev.tpcomm.nccl.") } shouldBe true
        shouldThrow<IllegalStateException> { HipStagingProvider().create() }
        System.getProperty("java.class.path").lowercase() shouldNotContain "bytedeco"
    }
})
