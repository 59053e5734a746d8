package dev.tpcomm.nccl

import dev.tpcomm.BackendUnavailableException
import dev.tpcomm.CommBackendFactory
import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.Device
import dev.tpcomm.gpu.BootstrapChannel
import dev.tpcomm.gpu.GpuProbe
import dev.tpcomm.gpu.NcclConnector
import dev.tpcomm.nccl.javacpp.JavaCppPlatform
import dev.tpcomm.spi.CommunicationErrors

/**
 * The `nccl` backend (priority 100): NVIDIA NCCL and the CUDA runtime through the JavaCPP presets,
 * on the [NcclConnector]. Available when the presets are on the classpath, `libcudart`/`libnccl` and
 * the NVIDIA driver load, NCCL is 2.18 or later, and a device is visible.
 *
 * [create] sets the [NcclEnvironment] variables (options `nccl.*`) before NCCL initialises, picks device
 * `nccl.device` or [CommConfig.localRank], and shares the unique id through
 * [BootstrapChannel.fromConfig]. Thread-safe; the probe runs once per factory instance.
 */
public class NcclBackendFactory : CommBackendFactory {
    override val name: String get() = "nccl"
    override val priority: Int get() = 100

    private val probe: GpuProbe get() = PROBE

    override fun isAvailable(): Boolean = probe.available

    override fun unavailableReason(): String? = probe.reason

    override suspend fun create(config: CommConfig): Communicator = create(config, null)

    /**
     * Like [create], with [bootstrap] (any communicator of the same ranks, e.g. MPI) used to share the
     * unique id instead of [CommConfig.rendezvous].
     *
     * @throws BackendUnavailableException when NCCL or a device is missing, saying what to install.
     */
    public suspend fun create(config: CommConfig, bootstrap: Communicator?): Communicator {
        val nccl = NcclEnvironment.fromOptions(config.options)
        nccl.apply()
        val p = probe
        if (!p.available) throw CommunicationErrors.unavailable(name, p.reason ?: "unavailable")
        val index = nccl.device ?: config.localRank
        require(index < p.deviceCount) {
            "rank ${config.rank}: device index $index (local rank, or option nccl.device) but only ${p.deviceCount} CUDA device(s) are visible; " +
                "run at most one rank per GPU on each host or set nccl.device"
        }
        val (channel, owned) = BootstrapChannel.fromConfig(config, bootstrap)
        return try {
            NcclConnector.connect(JavaCppPlatform.api(), JavaCppPlatform.runtime(), Device.Cuda(index), config, channel, name, onClose = owned)
        } catch (t: Throwable) {
            runCatching { owned?.close() }
            throw t
        }
    }

    internal companion object {
        /** Loading is attempted once per process: a failed static initialiser cannot be retried anyway. */
        val PROBE: GpuProbe by lazy { probeSafely() }

        fun probeSafely(): GpuProbe = try {
            JavaCppPlatform.probe()
        } catch (e: UnsatisfiedLinkError) {
            unavailable(e)
        } catch (e: ExceptionInInitializerError) {
            unavailable(e)
        } catch (e: NoClassDefFoundError) {
            if (e.message?.startsWith("Could not initialize class") == true) {
                unavailable(e)
            } else {
                GpuProbe(
                    false,
                    "the JavaCPP CUDA presets are not on the classpath (${e.message}); add org.bytedeco:cuda:13.3-9.25-1.5.14 with its " +
                        "linux-x86_64 classifier and org.bytedeco:javacpp, or use the rccl backend on AMD GPUs",
                    0, 0,
                )
            }
        } catch (e: LinkageError) {
            unavailable(e)
        }

        fun unavailable(e: Throwable): GpuProbe {
            val causes = generateSequence(e) { it.cause }.joinToString(" <- ") { "${it.javaClass.simpleName}: ${it.message}" }
            return GpuProbe(
                false,
                "NCCL or the CUDA runtime could not be loaded ($causes). " + (cuda13Advice(causes, null) ?: "") +
                    "Install the NVIDIA driver, and NCCL 2.18+ and the CUDA " +
                    "runtime from your distribution or NVIDIA's repository (libnccl2, cuda-cudart), or add the JavaCPP artifact " +
                    "org.bytedeco:cuda-redist (see docs/gpu.md)",
                0, 0,
            )
        }

        /**
         * What to do when the CUDA 13 runtime the preset links cannot serve this machine: the preset's
         * `libjnicudart.so` is linked against `libcudart.so.13`, which needs a driver of the R580 branch
         * or later. Two symptoms: the library is missing ([causes] names `libcudart.so.13`), or it loads and
         * `cudaGetDeviceCount` returns `cudaErrorInsufficientDriver` (35, CUDA `driver_types.h`) under an
         * older driver. Null for anything else. docs/gpu.md, "Supported drivers, runtimes and NCCL".
         */
        fun cuda13Advice(causes: String?, cudaError: Int?): String? {
            val missing = causes != null && "libcudart.so.13" in causes
            val oldDriver = cudaError == CUDA_ERROR_INSUFFICIENT_DRIVER
            if (!missing && !oldDriver) return null
            val what = if (missing) "the CUDA 13 runtime (libcudart.so.13) is not on the loader path" else "the NVIDIA driver is older than the CUDA 13 runtime"
            return "comm-nccl's JavaCPP preset (org.bytedeco:cuda 13.3-9.25-1.5.14) needs the CUDA 13 runtime and an R580 or later driver " +
                "(nvidia-smi shows 'CUDA Version: 13.0' or higher), and $what. Either install an R580+ driver and the CUDA 13 runtime " +
                "(cuda-cudart-13-x, or the nvidia-cuda-runtime-cu13 wheel's lib directory on LD_LIBRARY_PATH), or, on a CUDA 12 driver, " +
                "override org.bytedeco:cuda and org.bytedeco:javacpp with a CUDA 12 preset (docs/gpu.md, 'Supported drivers, runtimes and NCCL'), " +
                "or use the rccl backend's java.lang.foreign binding on libnccl.so.2 (RcclLibrary.nvidia()). "
        }

        /** `cudaErrorInsufficientDriver` (CUDA `driver_types.h`). */
        const val CUDA_ERROR_INSUFFICIENT_DRIVER: Int = 35
    }
}
