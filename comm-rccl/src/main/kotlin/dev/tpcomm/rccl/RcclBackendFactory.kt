package dev.tpcomm.rccl

import dev.tpcomm.BackendUnavailableException
import dev.tpcomm.CommBackendFactory
import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.Device
import dev.tpcomm.gpu.BootstrapChannel
import dev.tpcomm.gpu.DeviceRuntime
import dev.tpcomm.gpu.GpuProbe
import dev.tpcomm.gpu.NcclConnector
import dev.tpcomm.gpu.NcclVersion
import dev.tpcomm.spi.CommunicationErrors

/**
 * The `rccl` backend (priority 90): RCCL and the HIP runtime through `java.lang.foreign`, on
 * comm-nccl's engine. Available when `libamdhip64.so` and `librccl.so` open, RCCL reports NCCL API
 * 2.18 or later (ROCm 6.0+), and a HIP device is visible. [create] applies [RcclEnvironment] (options `rccl.*`)
 * before RCCL initialises and shares the unique id through [BootstrapChannel.fromConfig].
 * Thread-safe; loading is attempted once per process.
 */
public class RcclBackendFactory : CommBackendFactory {
    override val name: String get() = "rccl"
    override val priority: Int get() = 90

    override fun isAvailable(): Boolean = PLATFORM.probe.available

    override fun unavailableReason(): String? = PLATFORM.probe.reason

    override suspend fun create(config: CommConfig): Communicator = create(config, null)

    /**
     * Like [create], with [bootstrap] (a communicator of the same ranks, e.g. MPI) used to share the unique id.
     *
     * @throws BackendUnavailableException when RCCL, HIP or a device is missing, saying what to install.
     */
    public suspend fun create(config: CommConfig, bootstrap: Communicator?): Communicator {
        val rccl = RcclEnvironment.fromOptions(config.options)
        rccl.apply()
        val platform = PLATFORM
        val p = platform.probe
        if (!p.available) throw CommunicationErrors.unavailable(name, p.reason ?: "unavailable")
        val index = rccl.device ?: config.localRank
        require(index < p.deviceCount) {
            "rank ${config.rank}: device index $index (local rank, or option rccl.device) but only ${p.deviceCount} HIP device(s) are visible; " +
                "run at most one rank per GPU on each host or set rccl.device"
        }
        val (channel, owned) = BootstrapChannel.fromConfig(config, bootstrap)
        return try {
            NcclConnector.connect(platform.api!!, platform.runtime!!, Device.Rocm(index), config, channel, name, onClose = owned)
        } catch (t: Throwable) {
            runCatching { owned?.close() }
            throw t
        }
    }

    internal class Platform(val api: RcclLibrary?, val runtime: HipRuntime?, val probe: GpuProbe)

    internal companion object {
        val PLATFORM: Platform by lazy { load() }

        fun load(): Platform {
            val runtime = try {
                HipRuntime()
            } catch (e: Throwable) {
                return Platform(null, null, GpuProbe(false, missing(e), 0, 0))
            }
            val api = try {
                RcclLibrary()
            } catch (e: Throwable) {
                return Platform(null, runtime, GpuProbe(false, missing(e), 0, 0))
            }
            val count = IntArray(1)
            val rc = runtime.getDeviceCount(count)
            if (rc != DeviceRuntime.SUCCESS || count[0] == 0) {
                return Platform(api, runtime, GpuProbe(false, "no HIP device is visible (hipGetDeviceCount returned $rc, count ${count[0]}); check rocm-smi, /dev/kfd permissions and HIP_VISIBLE_DEVICES", 0, 0))
            }
            val v = IntArray(1)
            if (api.getVersion(v) != 0 || v[0] < NcclVersion.MINIMUM) {
                return Platform(api, runtime, GpuProbe(false, "RCCL ${NcclVersion.format(v[0])} is too old: tpcomm needs RCCL with NCCL API 2.18 or later (ROCm 6.0+)", count[0], v[0]))
            }
            return Platform(api, runtime, GpuProbe(true, null, count[0], v[0]))
        }

        fun missing(e: Throwable): String =
            "${e.message ?: e}. Install ROCm's HIP runtime and RCCL (e.g. 'apt-get install hip-runtime-amd rccl' from repo.radeon.com, " +
                "see docs/gpu.md), make sure /opt/rocm/lib is on the loader path (LD_LIBRARY_PATH), or point TPCOMM_HIP_LIBRARY / " +
                "TPCOMM_RCCL_LIBRARY at the libraries"
    }
}
