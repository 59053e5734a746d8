package dev.tpcomm.rccl

import dev.tpcomm.gpu.DeviceRuntime
import java.lang.foreign.Arena
import java.lang.foreign.FunctionDescriptor
import java.lang.foreign.MemoryLayout
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.lang.foreign.ValueLayout.ADDRESS
import java.lang.foreign.ValueLayout.JAVA_INT
import java.lang.foreign.ValueLayout.JAVA_LONG
import java.lang.invoke.MethodHandle

/**
 * [DeviceRuntime] over a GPU runtime library through `java.lang.foreign` downcalls: HIP's
 * (`libamdhip64.so`, [HipRuntime]) or CUDA's (`libcudart.so`, for running comm-rccl's binding of
 * NCCL's API against NVIDIA's `libnccl.so.2`). The two runtimes share every signature the engine
 * uses and every constant [DeviceRuntime] names, so one body serves both with the names of a
 * [Dialect]:
 * - ROCm/HIP `include/hip/hip_runtime_api.h` (see [RcclAbi]) and CUDA 13.0 `include/driver_types.h`
 *   (read on this machine, `/usr/local/cuda/include`): non-blocking stream flag 0x01
 *   (`hipStreamNonBlocking` / `cudaStreamNonBlocking`, line 101), disable-timing event flag 0x02
 *   (line 125), default page-locked allocation 0 (`cudaHostAllocDefault`, line 87), not-ready 600
 *   (`cudaErrorNotReady`, line 767), copy kinds host-to-device 1, device-to-host 2, device-to-device 3
 *   (lines 1248-1250).
 * - Only the page-locked allocation functions are named differently (`hipHostMalloc`/`hipHostFree`
 *   vs `cudaHostAlloc`/`cudaFreeHost`, CUDA `include/cuda_runtime_api.h` 4775 and 4887).
 *
 * Constructing it opens the library and resolves every symbol ([UnsatisfiedLinkError] otherwise).
 * The current device is per thread, as in both runtimes. Thread-safe.
 */
internal class FfmDeviceRuntime(private val lib: NativeLibrary, private val dialect: Dialect) : DeviceRuntime {
    /** The names that differ between the runtimes. */
    internal class Dialect(val platformName: String, val prefix: String, val hostAlloc: String, val hostFree: String)

    /** Where the library was loaded from. */
    val loadedFrom: String get() = lib.loadedFrom

    override val platformName: String get() = dialect.platformName

    private fun f(name: String, ret: ValueLayout, vararg args: MemoryLayout): MethodHandle = lib.function(name, FunctionDescriptor.of(ret, *args))

    private val getDeviceCount = f(dialect.prefix + "GetDeviceCount", JAVA_INT, ADDRESS)
    private val setDevice = f(dialect.prefix + "SetDevice", JAVA_INT, JAVA_INT)
    private val getDevice = f(dialect.prefix + "GetDevice", JAVA_INT, ADDRESS)
    private val mallocAsync = f(dialect.prefix + "MallocAsync", JAVA_INT, ADDRESS, JAVA_LONG, ADDRESS)
    private val freeAsync = f(dialect.prefix + "FreeAsync", JAVA_INT, ADDRESS, ADDRESS)
    private val hostMalloc = f(dialect.hostAlloc, JAVA_INT, ADDRESS, JAVA_LONG, JAVA_INT)
    private val hostFree = f(dialect.hostFree, JAVA_INT, ADDRESS)
    private val streamCreateWithFlags = f(dialect.prefix + "StreamCreateWithFlags", JAVA_INT, ADDRESS, JAVA_INT)
    private val streamDestroy = f(dialect.prefix + "StreamDestroy", JAVA_INT, ADDRESS)
    private val eventCreateWithFlags = f(dialect.prefix + "EventCreateWithFlags", JAVA_INT, ADDRESS, JAVA_INT)
    private val eventDestroy = f(dialect.prefix + "EventDestroy", JAVA_INT, ADDRESS)
    private val eventRecord = f(dialect.prefix + "EventRecord", JAVA_INT, ADDRESS, ADDRESS)
    private val eventQuery = f(dialect.prefix + "EventQuery", JAVA_INT, ADDRESS)
    private val eventSynchronize = f(dialect.prefix + "EventSynchronize", JAVA_INT, ADDRESS)
    private val streamWaitEvent = f(dialect.prefix + "StreamWaitEvent", JAVA_INT, ADDRESS, ADDRESS, JAVA_INT)
    private val malloc = f(dialect.prefix + "Malloc", JAVA_INT, ADDRESS, JAVA_LONG)
    private val free = f(dialect.prefix + "Free", JAVA_INT, ADDRESS)
    // hipMemGetInfo(size_t* free, size_t* total) (ROCm/HIP include/hip/hip_runtime_api.h) /
    // cudaMemGetInfo(size_t* free, size_t* total) (CUDA include/cuda_runtime_api.h).
    private val memGetInfo = f(dialect.prefix + "MemGetInfo", JAVA_INT, ADDRESS, ADDRESS)
    private val memcpyAsync = f(dialect.prefix + "MemcpyAsync", JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, JAVA_INT, ADDRESS)
    private val memcpy2DAsync = f(dialect.prefix + "Memcpy2DAsync", JAVA_INT, ADDRESS, JAVA_LONG, ADDRESS, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_INT, ADDRESS)
    private val getErrorString = f(dialect.prefix + "GetErrorString", ADDRESS, JAVA_INT)

    private fun p(address: Long): MemorySegment = MemorySegment.ofAddress(address)

    private inline fun handleOut(out: LongArray, call: (MemorySegment) -> Int): Int = Arena.ofConfined().use { a ->
        val s = a.allocate(ADDRESS)
        val rc = call(s)
        out[0] = s.get(ADDRESS, 0).address()
        rc
    }

    override fun getDeviceCount(count: IntArray): Int = Arena.ofConfined().use { a ->
        val s = a.allocate(JAVA_INT)
        val rc = getDeviceCount.invokeExact(s) as Int
        count[0] = s.get(JAVA_INT, 0)
        rc
    }

    override fun memGetInfo(free: LongArray, total: LongArray): Int = Arena.ofConfined().use { a ->
        val f = a.allocate(JAVA_LONG)
        val t = a.allocate(JAVA_LONG)
        val rc = memGetInfo.invokeExact(f, t) as Int
        free[0] = f.get(JAVA_LONG, 0)
        total[0] = t.get(JAVA_LONG, 0)
        rc
    }

    override fun setDevice(device: Int): Int = setDevice.invokeExact(device) as Int

    override fun getDevice(device: IntArray): Int = Arena.ofConfined().use { a ->
        val s = a.allocate(JAVA_INT)
        val rc = getDevice.invokeExact(s) as Int
        device[0] = s.get(JAVA_INT, 0)
        rc
    }

    override fun mallocAsync(ptr: LongArray, bytes: Long, stream: Long): Int = handleOut(ptr) { mallocAsync.invokeExact(it, bytes, p(stream)) as Int }

    override fun freeAsync(ptr: Long, stream: Long): Int = freeAsync.invokeExact(p(ptr), p(stream)) as Int

    /** `hipHostMalloc(&ptr, bytes, hipHostMallocDefault = 0)` / `cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault = 0)`. */
    override fun hostAlloc(ptr: LongArray, bytes: Long): Int = handleOut(ptr) { hostMalloc.invokeExact(it, bytes, 0) as Int }

    override fun freeHost(ptr: Long): Int = hostFree.invokeExact(p(ptr)) as Int

    override fun streamCreateNonBlocking(stream: LongArray): Int =
        handleOut(stream) { streamCreateWithFlags.invokeExact(it, RcclAbi.STREAM_NON_BLOCKING) as Int }

    override fun streamDestroy(stream: Long): Int = streamDestroy.invokeExact(p(stream)) as Int

    override fun eventCreateDisableTiming(event: LongArray): Int =
        handleOut(event) { eventCreateWithFlags.invokeExact(it, RcclAbi.EVENT_DISABLE_TIMING) as Int }

    override fun eventDestroy(event: Long): Int = eventDestroy.invokeExact(p(event)) as Int

    override fun eventRecord(event: Long, stream: Long): Int = eventRecord.invokeExact(p(event), p(stream)) as Int

    override fun eventQuery(event: Long): Int = eventQuery.invokeExact(p(event)) as Int

    override fun eventSynchronize(event: Long): Int = eventSynchronize.invokeExact(p(event)) as Int

    override fun streamWaitEvent(stream: Long, event: Long): Int = streamWaitEvent.invokeExact(p(stream), p(event), 0) as Int

    override fun malloc(ptr: LongArray, bytes: Long): Int = handleOut(ptr) { malloc.invokeExact(it, bytes) as Int }

    override fun free(ptr: Long): Int = free.invokeExact(p(ptr)) as Int

    override fun memcpyAsync(dst: Long, src: Long, bytes: Long, kind: Int, stream: Long): Int =
        memcpyAsync.invokeExact(p(dst), p(src), bytes, kind, p(stream)) as Int

    override fun memcpy2DAsync(dst: Long, dstPitch: Long, src: Long, srcPitch: Long, width: Long, height: Long, kind: Int, stream: Long): Int =
        memcpy2DAsync.invokeExact(p(dst), dstPitch, p(src), srcPitch, width, height, kind, p(stream)) as Int

    override fun getErrorString(error: Int): String = cString(getErrorString.invokeExact(error) as MemorySegment) ?: "unknown"

    internal companion object {
        val HIP = Dialect("HIP", "hip", "hipHostMalloc", "hipHostFree")
        val CUDA = Dialect("CUDA", "cuda", "cudaHostAlloc", "cudaFreeHost")

        /** The HIP runtime from `TPCOMM_HIP_LIBRARY`, the loader's path, `$ROCM_PATH/lib` or `/opt/rocm/lib`. */
        fun hip(): FfmDeviceRuntime = FfmDeviceRuntime(
            NativeLibrary("the HIP runtime (libamdhip64.so)", NativeLibrary.candidates("TPCOMM_HIP_LIBRARY", "libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6")),
            HIP,
        )

        /**
         * The CUDA runtime from `TPCOMM_CUDART_LIBRARY`, the loader's path, `$CUDA_HOME/lib64` or
         * `/usr/local/cuda/lib64` (`libcudart.so.13`, then `.12`, then `libcudart.so`).
         */
        fun cuda(): FfmDeviceRuntime {
            val names = arrayOf("libcudart.so.13", "libcudart.so.12", "libcudart.so")
            val candidates = buildList {
                System.getenv("TPCOMM_CUDART_LIBRARY")?.takeIf { it.isNotBlank() }?.let { add(it) }
                addAll(names)
                System.getenv("CUDA_HOME")?.takeIf { it.isNotBlank() }?.let { root -> names.forEach { add("$root/lib64/$it") } }
                names.forEach { add("/usr/local/cuda/lib64/$it") }
            }
            return FfmDeviceRuntime(NativeLibrary("the CUDA runtime (libcudart.so)", candidates), CUDA)
        }
    }
}
