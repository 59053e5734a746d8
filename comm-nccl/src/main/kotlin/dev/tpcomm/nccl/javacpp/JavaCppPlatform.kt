package dev.tpcomm.nccl.javacpp

import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.gpu.DeviceRuntime
import dev.tpcomm.gpu.GpuProbe
import dev.tpcomm.gpu.NcclApi
import dev.tpcomm.gpu.NcclVersion
import org.bytedeco.cuda.global.cudart
import org.bytedeco.cuda.global.nccl

/**
 * Entry point of the JavaCPP bindings for the factory. Its signatures use only tpcomm types, so a
 * caller outside this package never links against JavaCPP classes until it calls in (and then gets
 * `NoClassDefFoundError` when the presets are not on the classpath, which the factory catches).
 * Internal ([InternalTpcommApi]): it hands out the raw seams [JavaCppNcclApi] and [JavaCppCudaRuntime].
 */
@InternalTpcommApi
public object JavaCppPlatform {
    // One of each per process (both are stateless): comm-gpu gives every communicator of a device
    // one native thread, found by the runtime instance (DeviceThreads), so every Comm.create("nccl")
    // must pass the same runtime.
    private val API: NcclApi by lazy { JavaCppNcclApi() }
    private val RUNTIME: DeviceRuntime by lazy { JavaCppCudaRuntime() }

    /** The NCCL API over JavaCPP: the same instance on every call. */
    @JvmStatic
    public fun api(): NcclApi = API

    /** The CUDA runtime over JavaCPP: the same instance on every call (communicators of a device share one native thread by it). */
    @JvmStatic
    public fun runtime(): DeviceRuntime = RUNTIME

    /**
     * Loads CUDA's runtime and NCCL and counts devices. Throws what loading throws
     * (`UnsatisfiedLinkError`, `ExceptionInInitializerError`, `NoClassDefFoundError`); the caller reports it.
     */
    @JvmStatic
    public fun probe(): GpuProbe {
        val count = IntArray(1)
        val rc = cudart.cudaGetDeviceCount(count)
        if (rc != cudart.cudaSuccess) {
            val text = cudart.cudaGetErrorString(rc)?.string
            return GpuProbe(false, "the CUDA runtime loaded but found no usable GPU: cudaGetDeviceCount returned $rc ($text); " +
                (dev.tpcomm.nccl.NcclBackendFactory.cuda13Advice(null, rc) ?: "") +
                "check the NVIDIA driver (nvidia-smi) and CUDA_VISIBLE_DEVICES", 0, 0)
        }
        val v = IntArray(1)
        val nrc = nccl.ncclGetVersion(v)
        if (nrc != nccl.ncclSuccess) return GpuProbe(false, "NCCL loaded but ncclGetVersion returned $nrc", count[0], 0)
        if (count[0] == 0) {
            return GpuProbe(false, "no CUDA device is visible (cudaGetDeviceCount = 0); check nvidia-smi and CUDA_VISIBLE_DEVICES", 0, v[0])
        }
        if (v[0] < NcclVersion.MINIMUM) {
            return GpuProbe(false, "NCCL ${NcclVersion.format(v[0])} is too old; tpcomm needs NCCL 2.18 or later (ncclCommSplit, finalize, a non-blocking init that does not read the out-pointer later)", count[0], v[0])
        }
        return GpuProbe(true, null, count[0], v[0])
    }
}
