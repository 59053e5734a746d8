package dev.tpcomm.nccl

import dev.tpcomm.Device
import dev.tpcomm.spi.DeviceStagingRegistry
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain

class CudaStagingProviderTest : FunSpec({
    test("the CUDA provider is found by ServiceLoader and, without CUDA here, offers nothing and says why") {
        DeviceStagingRegistry.find(Device.Cuda(0)) shouldBe null
        val note = DeviceStagingRegistry.unavailable.single { it.startsWith(CudaStagingProvider::class.java.name) }
        note shouldContain "CUDA staging is not available"
        note shouldContain "NCCL or the CUDA runtime could not be loaded"
        shouldThrow<IllegalStateException> { CudaStagingProvider().create() }
    }
})
