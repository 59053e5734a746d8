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
 * [DeviceRuntime] over the HIP runtime (`libamdhip64.so`) through `java.lang.foreign` downcalls.
 * Constructing it opens the library (from `TPCOMM_HIP_LIBRARY`, the loader's path, `$ROCM_PATH/lib`
 * or `/opt/rocm/lib`) and resolves every symbol ([UnsatisfiedLinkError] otherwise). The current
 * device is per thread, as in HIP. Thread-safe.
 */
public class HipRuntime : DeviceRuntime {
    private val lib = NativeLibrary(
        "the HIP runtime (libamdhip64.so)",
        NativeLibrary.candidates("TPCOMM_HIP_LIBRARY", "libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6"),
    )

    /** Where the library was loaded from. */
    public val loadedFrom: String get() = lib.loadedFrom

    override val platformName: String get() = "HIP"

    private fun f(name: String, ret: ValueLayout, vararg args: MemoryLayout): MethodHandle = lib.function(name, FunctionDescriptor.of(ret, *args))

    private val getDeviceCount = f("hipGetDeviceCount", JAVA_INT, ADDRESS)
    private val setDevice = f("hipSetDevice", JAVA_INT, JAVA_INT)
    private val getDevice = f("hipGetDevice", JAVA_INT, ADDRESS)
    private val mallocAsync = f("hipMallocAsync", JAVA_INT, ADDRESS, JAVA_LONG, ADDRESS)
    private val freeAsync = f("hipFreeAsync", JAVA_INT, ADDRESS, ADDRESS)
    private val hostMalloc = f("hipHostMalloc", JAVA_INT, ADDRESS, JAVA_LONG, JAVA_INT)
    private val hostFree = f("hipHostFree", JAVA_INT, ADDRESS)
    private val streamCreateWithFlags = f("hipStreamCreateWithFlags", JAVA_INT, ADDRESS, JAVA_INT)
    private val streamDestroy = f("hipStreamDestroy", JAVA_INT, ADDRESS)
    private val eventCreateWithFlags = f("hipEventCreateWithFlags", JAVA_INT, ADDRESS, JAVA_INT)
    private val eventDestroy = f("hipEventDestroy", JAVA_INT, ADDRESS)
    private val eventRecord = f("hipEventRecord", JAVA_INT, ADDRESS, ADDRESS)
    private val eventQuery = f("hipEventQuery", JAVA_INT, ADDRESS)
    private val eventSynchronize = f("hipEventSynchronize", JAVA_INT, ADDRESS)
    private val streamWaitEvent = f("hipStreamWaitEvent", JAVA_INT, ADDRESS, ADDRESS, JAVA_INT)
    private val malloc = f("hipMalloc", JAVA_INT, ADDRESS, JAVA_LONG)
    private val free = f("hipFree", JAVA_INT, ADDRESS)
    private val memcpyAsync = f("hipMemcpyAsync", JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, JAVA_INT, ADDRESS)
    private val memcpy2DAsync = f("hipMemcpy2DAsync", JAVA_INT, ADDRESS, JAVA_LONG, ADDRESS, JAVA_LONG, JAVA_LONG, JAVA_LONG, JAVA_INT, ADDRESS)
    private val getErrorString = f("hipGetErrorString", ADDRESS, JAVA_INT)

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

    override fun setDevice(device: Int): Int = setDevice.invokeExact(device) as Int

    override fun getDevice(device: IntArray): Int = Arena.ofConfined().use { a ->
        val s = a.allocate(JAVA_INT)
        val rc = getDevice.invokeExact(s) as Int
        device[0] = s.get(JAVA_INT, 0)
        rc
    }

    override fun mallocAsync(ptr: LongArray, bytes: Long, stream: Long): Int = handleOut(ptr) { mallocAsync.invokeExact(it, bytes, p(stream)) as Int }

    override fun freeAsync(ptr: Long, stream: Long): Int = freeAsync.invokeExact(p(ptr), p(stream)) as Int

    /** `hipHostMalloc(&ptr, bytes, hipHostMallocDefault = 0)` (ROCm/HIP `include/hip/hip_runtime_api.h`). */
    override fun hostAlloc(ptr: LongArray, bytes: Long): Int = handleOut(ptr) { hostMalloc.invokeExact(it, bytes, 0) as Int }

    override fun freeHost(ptr: Long): Int = hostFree.invokeExact(p(ptr)) as Int

    override fun streamCreateNonBlocking(stream: LongArray): Int =
        handleOut(stream) { streamCreateWithFlags.invokeExact(it, RcclAbi.HIP_STREAM_NON_BLOCKING) as Int }

    override fun streamDestroy(stream: Long): Int = streamDestroy.invokeExact(p(stream)) as Int

    override fun eventCreateDisableTiming(event: LongArray): Int =
        handleOut(event) { eventCreateWithFlags.invokeExact(it, RcclAbi.HIP_EVENT_DISABLE_TIMING) as Int }

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
}
