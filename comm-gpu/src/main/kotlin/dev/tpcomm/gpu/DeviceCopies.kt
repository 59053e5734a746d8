package dev.tpcomm.gpu

import dev.tpcomm.Device
import dev.tpcomm.Tensor

/**
 * Synchronous copies between host tensors and new device tensors on [device], for tests, tools and
 * data loading (never used by the communicators themselves). Each call makes [device] current on
 * the calling thread, copies on a private stream and waits for the copy. A device tensor from
 * [upload] owns its memory: its `close()` frees it, or the Cleaner once it is unreachable (once
 * either way). The memory is stream-ordered (`cudaMallocAsync` on the copy's stream, which the
 * upload waits for) and so freed with `cudaFreeAsync`, as CUDA pairs them (CUDA Programming Guide,
 * "Stream-Ordered Memory Allocator": memory from `cudaMalloc` is freed with `cudaFree`, which
 * synchronises the device; stream-ordered memory with `cudaFreeAsync`). Thread-safe.
 *
 * @throws IllegalStateException when a runtime call fails, with its error string.
 */
public class DeviceCopies(
    private val runtime: DeviceRuntime,
    /** The GPU whose memory these copies allocate and free. */
    public val device: Device,
) {
    private val index = deviceIndex(device)

    /** A new device tensor holding [host]'s dtype, shape and bytes. */
    public fun upload(host: Tensor): Tensor {
        val p = LongArray(1)
        check(runtime.setDevice(index), "setDevice")
        onStream { s ->
            check(runtime.mallocAsync(p, host.byteSize.coerceAtLeast(1), s), "mallocAsync")
            if (host.byteSize > 0) check(runtime.memcpyAsync(p[0], host.segment.address(), host.byteSize, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, s), "memcpyAsync")
        }
        return Tensor.wrapDeviceOwned(device, p[0], host.dtype, host.shape.toIntArray(), Free(runtime, index, p[0]))
    }

    /** A new host tensor holding device tensor [tensor]'s bytes (after the work already queued on it, when that work was waited for). */
    public fun download(tensor: Tensor): Tensor {
        if (!tensor.device.isGpu) return tensor
        val out = Tensor.zeros(tensor.dtype, tensor.shape)
        check(runtime.setDevice(index), "setDevice")
        copy(out.segment.address(), tensor.address, tensor.byteSize, DeviceRuntime.MEMCPY_DEVICE_TO_HOST)
        return out
    }

    private fun copy(dst: Long, src: Long, bytes: Long, kind: Int) {
        if (bytes == 0L) return
        onStream { s -> check(runtime.memcpyAsync(dst, src, bytes, kind, s), "memcpyAsync") }
    }

    /** Runs [work] on a new private stream, waits for it (an event) and destroys the stream. */
    private inline fun onStream(work: (Long) -> Unit) {
        val s = LongArray(1)
        val e = LongArray(1)
        check(runtime.streamCreateNonBlocking(s), "streamCreateWithFlags")
        try {
            check(runtime.eventCreateDisableTiming(e), "eventCreateWithFlags")
            work(s[0])
            check(runtime.eventRecord(e[0], s[0]), "eventRecord")
            check(runtime.eventSynchronize(e[0]), "eventSynchronize")
        } finally {
            if (e[0] != 0L) runtime.eventDestroy(e[0])
            runtime.streamDestroy(s[0])
        }
    }

    private fun check(code: Int, call: String) {
        check(code == DeviceRuntime.SUCCESS) { "${runtime.platformName} $call failed with error $code: ${runtime.getErrorString(code)}" }
    }

    /**
     * The tensor's release (its first close, or the Cleaner): makes the tensor's device current
     * (otherwise the runtime acts on device 0 and opens a context there), frees on the legacy default
     * stream (`cudaFreeAsync(ptr, 0)`, after the work queued there; never blocks), and restores the
     * calling thread's current device.
     */
    private class Free(val runtime: DeviceRuntime, val device: Int, val ptr: Long) : Runnable {
        override fun run() {
            val previous = IntArray(1)
            val restore = runtime.getDevice(previous) == DeviceRuntime.SUCCESS
            runtime.setDevice(device)
            runtime.freeAsync(ptr, 0L)
            if (restore && previous[0] != device) runtime.setDevice(previous[0])
        }
    }
}
