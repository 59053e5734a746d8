package dev.tpcomm.rccl

import dev.tpcomm.gpu.DeviceRuntimeStaging
import dev.tpcomm.spi.DeviceStaging
import dev.tpcomm.spi.DeviceStagingProvider

/**
 * Offers [DeviceRuntimeStaging.rocm] over [HipRuntime] to [dev.tpcomm.spi.DeviceStagingRegistry]
 * (through `ServiceLoader`), so that the MPI backend can stage ROCm tensors. Available when
 * [RcclBackendFactory] is (its probe: the HIP runtime, RCCL and a device); otherwise [create] throws
 * [IllegalStateException] with the probe's reason. Thread-safe.
 */
public class HipStagingProvider : DeviceStagingProvider {
    override fun create(): DeviceStaging {
        val platform = RcclBackendFactory.PLATFORM
        check(platform.probe.available) { "HIP staging is not available: ${platform.probe.reason}" }
        return DeviceRuntimeStaging.rocm(checkNotNull(platform.runtime) { "the HIP runtime did not load" })
    }
}
