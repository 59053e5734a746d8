package dev.tpcomm.gpu

/**
 * The GPU runtime calls the engine needs (CUDA runtime or HIP), with C's conventions: each method
 * returns the runtime's error code (0 is success for both `cudaError_t` and `hipError_t`) and
 * writes handles into the caller's out-arrays. Streams, events and device pointers are native
 * addresses as `Long`.
 *
 * Implemented by comm-nccl's `JavaCppCudaRuntime`, comm-rccl's HIP runtime over
 * `java.lang.foreign`, and comm-gpu's test fixture `SimulatedGpuPlatform`. Thread-safety as the C
 * runtime's: the current device is per thread ([setDevice]).
 */
public interface DeviceRuntime {
    /** `CUDA` or `HIP` (or a simulated platform's name), used in messages. */
    public val platformName: String

    /** `cudaGetDeviceCount(int*)` / `hipGetDeviceCount`. */
    public fun getDeviceCount(count: IntArray): Int

    /** `cudaSetDevice(int)` / `hipSetDevice`: the calling thread's current device. */
    public fun setDevice(device: Int): Int

    /** `cudaGetDevice(int*)` / `hipGetDevice`: the calling thread's current device (device 0 on a thread that never set one). */
    public fun getDevice(device: IntArray): Int

    /** `cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)` / `hipStreamCreateWithFlags(.., hipStreamNonBlocking)`. */
    public fun streamCreateNonBlocking(stream: LongArray): Int

    /** `cudaStreamDestroy` / `hipStreamDestroy`. */
    public fun streamDestroy(stream: Long): Int

    /** `cudaEventCreateWithFlags(&event, cudaEventDisableTiming)` / `hipEventCreateWithFlags(.., hipEventDisableTiming)`. */
    public fun eventCreateDisableTiming(event: LongArray): Int

    /** `cudaEventDestroy` / `hipEventDestroy`. */
    public fun eventDestroy(event: Long): Int

    /** `cudaEventRecord(event, stream)` / `hipEventRecord`. */
    public fun eventRecord(event: Long, stream: Long): Int

    /** `cudaEventQuery(event)` / `hipEventQuery`: 0 when the work before the event is done, [ERROR_NOT_READY] while it runs. */
    public fun eventQuery(event: Long): Int

    /** `cudaEventSynchronize` / `hipEventSynchronize`: blocks the calling thread until the event completes. */
    public fun eventSynchronize(event: Long): Int

    /** `cudaStreamWaitEvent(stream, event, 0)` / `hipStreamWaitEvent`: later work on [stream] waits for [event]. */
    public fun streamWaitEvent(stream: Long, event: Long): Int

    /** `cudaMalloc(&ptr, bytes)` / `hipMalloc`. */
    public fun malloc(ptr: LongArray, bytes: Long): Int

    /**
     * `cudaFree(ptr)` / `hipFree`. **Blocks** until all work on the device is done (an implicit
     * device synchronisation in both runtimes), so the engine never calls it on a thread that must
     * observe deadlines; it uses [freeAsync].
     */
    public fun free(ptr: Long): Int

    /**
     * `cudaMemGetInfo(&free, &total)` / `hipMemGetInfo`: the current device's free and total memory
     * in bytes. The device memory budget's default is a fraction of `free` at the first allocation.
     * The default body answers `cudaErrorNotSupported` (801), for runtimes that cannot tell: the
     * budget is then unlimited unless set.
     */
    public fun memGetInfo(free: LongArray, total: LongArray): Int = ERROR_NOT_SUPPORTED

    /** `cudaMallocAsync(&ptr, bytes, stream)` / `hipMallocAsync` (CUDA 11.2, ROCm 5.3): stream-ordered allocation, no synchronisation. */
    public fun mallocAsync(ptr: LongArray, bytes: Long, stream: Long): Int

    /** `cudaFreeAsync(ptr, stream)` / `hipFreeAsync`: frees [ptr] once the work queued on [stream] before it is done; never blocks. */
    public fun freeAsync(ptr: Long, stream: Long): Int

    /** `cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault)` / `hipHostMalloc`: page-locked host memory, which async copies do not block on. */
    public fun hostAlloc(ptr: LongArray, bytes: Long): Int

    /** `cudaFreeHost(ptr)` / `hipHostFree`. */
    public fun freeHost(ptr: Long): Int

    /**
     * `cudaMemcpyAsync(dst, src, bytes, kind, stream)` / `hipMemcpyAsync`; [kind] is one of the `MEMCPY_*` codes.
     * A copy to or from **pageable** host memory blocks the caller until the stream reaches it; only
     * page-locked memory ([hostAlloc]) makes it asynchronous.
     */
    public fun memcpyAsync(dst: Long, src: Long, bytes: Long, kind: Int, stream: Long): Int

    /**
     * `cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind, stream)` / `hipMemcpy2DAsync`:
     * copies [height] rows of [width] bytes, rows [srcPitch] bytes apart in the source and [dstPitch] in the destination.
     */
    public fun memcpy2DAsync(dst: Long, dstPitch: Long, src: Long, srcPitch: Long, width: Long, height: Long, kind: Int, stream: Long): Int

    /** `cudaGetErrorString` / `hipGetErrorString`. */
    public fun getErrorString(error: Int): String

    public companion object {
        /** `cudaSuccess` / `hipSuccess` = 0. */
        public const val SUCCESS: Int = 0

        /**
         * `cudaErrorNotReady` / `hipErrorNotReady` = 600 (CUDA `driver_types.h` of CUDA 13.3 as the
         * preset's `cudart.cudaErrorNotReady`; ROCm/HIP `include/hip/hip_runtime_api.h`, commit 746dcac).
         */
        public const val ERROR_NOT_READY: Int = 600

        /**
         * `cudaErrorMemoryAllocation` / `hipErrorOutOfMemory` = 2 (CUDA `driver_types.h`; ROCm/HIP
         * `hip_runtime_api.h`): what `cudaMalloc`/`cudaMallocAsync` return when device memory is exhausted.
         */
        public const val ERROR_MEMORY_ALLOCATION: Int = 2

        /** `cudaErrorNotSupported` = 801 (CUDA `driver_types.h`). */
        public const val ERROR_NOT_SUPPORTED: Int = 801

        /** `cudaMemcpyHostToHost` / `hipMemcpyHostToHost` = 0 (CUDA `driver_types.h`; ROCm/HIP `hip_runtime_api.h` / `driver_types.h`). */
        public const val MEMCPY_HOST_TO_HOST: Int = 0
        /** `cudaMemcpyHostToDevice` / `hipMemcpyHostToDevice` = 1. */
        public const val MEMCPY_HOST_TO_DEVICE: Int = 1
        /** `cudaMemcpyDeviceToHost` / `hipMemcpyDeviceToHost` = 2. */
        public const val MEMCPY_DEVICE_TO_HOST: Int = 2
        /** `cudaMemcpyDeviceToDevice` / `hipMemcpyDeviceToDevice` = 3. */
        public const val MEMCPY_DEVICE_TO_DEVICE: Int = 3
    }
}
