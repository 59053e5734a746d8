package dev.tpcomm.nccl.javacpp

import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.gpu.DeviceRuntime
import org.bytedeco.cuda.cudart.CUevent_st
import org.bytedeco.cuda.cudart.CUstream_st
import org.bytedeco.cuda.global.cudart
import org.bytedeco.javacpp.Pointer
import org.bytedeco.javacpp.SizeTPointer

/**
 * [DeviceRuntime] over the CUDA runtime through the JavaCPP presets (`org.bytedeco.cuda.global.cudart`,
 * CUDA 13.3 headers). The first use loads `libcudart` and the driver (`UnsatisfiedLinkError`
 * without an NVIDIA driver). Stateless; the current device is per thread, as in CUDA.
 *
 * A raw native seam: its methods call the library directly (`ncclCommAbort`, `ncclGroupStart`, frees
 * of device memory) outside the engine's ordering, so it needs the [InternalTpcommApi] opt-in. Users
 * get it through `Comm.create("nccl")`, never by constructing it.
 */
@InternalTpcommApi
public class JavaCppCudaRuntime : DeviceRuntime {
    override val platformName: String get() = "CUDA"

    override fun getDeviceCount(count: IntArray): Int = cudart.cudaGetDeviceCount(count)

    override fun setDevice(device: Int): Int = cudart.cudaSetDevice(device)

    override fun getDevice(device: IntArray): Int = cudart.cudaGetDevice(device)

    override fun streamCreateNonBlocking(stream: LongArray): Int {
        val s = CUstream_st()
        val rc = cudart.cudaStreamCreateWithFlags(s, cudart.cudaStreamNonBlocking)
        stream[0] = s.address()
        return rc
    }

    override fun streamDestroy(stream: Long): Int = cudart.cudaStreamDestroy(CUstream_st(RawPointer(stream)))

    override fun eventCreateDisableTiming(event: LongArray): Int {
        val e = CUevent_st()
        val rc = cudart.cudaEventCreateWithFlags(e, cudart.cudaEventDisableTiming)
        event[0] = e.address()
        return rc
    }

    override fun eventDestroy(event: Long): Int = cudart.cudaEventDestroy(ev(event))

    override fun eventRecord(event: Long, stream: Long): Int = cudart.cudaEventRecord(ev(event), CUstream_st(RawPointer(stream)))

    override fun eventQuery(event: Long): Int = cudart.cudaEventQuery(ev(event))

    override fun eventSynchronize(event: Long): Int = cudart.cudaEventSynchronize(ev(event))

    override fun streamWaitEvent(stream: Long, event: Long): Int = cudart.cudaStreamWaitEvent(CUstream_st(RawPointer(stream)), ev(event), 0)

    override fun malloc(ptr: LongArray, bytes: Long): Int {
        val p = Pointer()
        val rc = cudart.cudaMalloc(p, bytes)
        ptr[0] = p.address()
        return rc
    }

    override fun free(ptr: Long): Int = cudart.cudaFree(RawPointer(ptr))

    override fun memGetInfo(free: LongArray, total: LongArray): Int {
        val f = SizeTPointer(1)
        val t = SizeTPointer(1)
        try {
            val rc = cudart.cudaMemGetInfo(f, t)
            free[0] = f.get()
            total[0] = t.get()
            return rc
        } finally {
            f.close()
            t.close()
        }
    }

    override fun mallocAsync(ptr: LongArray, bytes: Long, stream: Long): Int {
        val p = Pointer()
        val rc = cudart.cudaMallocAsync(p, bytes, CUstream_st(RawPointer(stream)))
        ptr[0] = p.address()
        return rc
    }

    override fun freeAsync(ptr: Long, stream: Long): Int = cudart.cudaFreeAsync(RawPointer(ptr), CUstream_st(RawPointer(stream)))

    override fun hostAlloc(ptr: LongArray, bytes: Long): Int {
        val p = Pointer()
        val rc = cudart.cudaHostAlloc(p, bytes, cudart.cudaHostAllocDefault)
        ptr[0] = p.address()
        return rc
    }

    override fun freeHost(ptr: Long): Int = cudart.cudaFreeHost(RawPointer(ptr))

    override fun memcpyAsync(dst: Long, src: Long, bytes: Long, kind: Int, stream: Long): Int =
        cudart.cudaMemcpyAsync(RawPointer(dst), RawPointer(src), bytes, kind, CUstream_st(RawPointer(stream)))

    override fun memcpy2DAsync(dst: Long, dstPitch: Long, src: Long, srcPitch: Long, width: Long, height: Long, kind: Int, stream: Long): Int =
        cudart.cudaMemcpy2DAsync(RawPointer(dst), dstPitch, RawPointer(src), srcPitch, width, height, kind, CUstream_st(RawPointer(stream)))

    override fun getErrorString(error: Int): String = cudart.cudaGetErrorString(error)?.string ?: "unknown"

    private fun ev(handle: Long): CUevent_st = CUevent_st(RawPointer(handle))
}
