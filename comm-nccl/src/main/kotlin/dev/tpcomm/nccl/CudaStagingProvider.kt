package dev.tpcomm.nccl

import dev.tpcomm.gpu.DeviceRuntimeStaging
import dev.tpcomm.nccl.javacpp.JavaCppPlatform
import dev.tpcomm.spi.DeviceStaging
import dev.tpcomm.spi.DeviceStagingProvider

/**
 * Offers [DeviceRuntimeStaging.cuda] over the CUDA runtime of the JavaCPP presets to
 * [dev.tpcomm.spi.DeviceStagingRegistry] (through `ServiceLoader`), so that the MPI backend can
 * stage CUDA tensors when MPI is not CUDA-aware. Available when [NcclBackendFactory] is (its probe:
 * the presets, the CUDA runtime, NCCL 2.18+ and a device); otherwise [create] throws
 * [IllegalStateException] with the probe's reason. Thread-safe.
 */
public class CudaStagingProvider : DeviceStagingProvider {
    override fun create(): DeviceStaging {
        val probe = NcclBackendFactory.PROBE
        check(probe.available) { "CUDA staging is not available: ${probe.reason}" }
        return DeviceRuntimeStaging.cuda(JavaCppPlatform.runtime())
    }
}
