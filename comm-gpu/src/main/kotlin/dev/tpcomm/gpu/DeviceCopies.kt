package dev.tpcomm.gpu

import dev.tpcomm.Device
import dev.tpcomm.Tensor
import java.lang.ref.Cleaner

/**
 * Synchronous copies between host tensors and new device tensors on [device], for tests, tools and
 * data loading (never used by the communicators themselves). Each call makes [device] current on
 * the calling thread, copies on a private stream and waits for the copy. Device tensors from
 * [upload] are freed when they become unreachable. Thread-safe.
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
        check(runtime.malloc(p, host.byteSize.coerceAtLeast(1)), "malloc")
        copy(p[0], host.segment.address(), host.byteSize, DeviceRuntime.MEMCPY_HOST_TO_DEVICE)
        val t = Tensor.wrapDevice(device, p[0], host.dtype, *host.shape.toIntArray())
        CLEANER.register(t, Free(runtime, index, p[0]))
        return t
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
        val s = LongArray(1)
        val e = LongArray(1)
        check(runtime.streamCreateNonBlocking(s), "streamCreateWithFlags")
        try {
            check(runtime.eventCreateDisableTiming(e), "eventCreateWithFlags")
            check(runtime.memcpyAsync(dst, src, bytes, kind, s[0]), "memcpyAsync")
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
     * Runs on the Cleaner thread, which has no current device: makes the tensor's device current
     * first (otherwise the runtime acts on device 0 and opens a context there), then frees on the
     * legacy default stream (`cudaFreeAsync(ptr, 0)`), which never blocks the shared Cleaner thread.
     */
    private class Free(val runtime: DeviceRuntime, val device: Int, val ptr: Long) : Runnable {
        override fun run() {
            runtime.setDevice(device)
            runtime.freeAsync(ptr, 0L)
        }
    }

    private companion object {
        val CLEANER: Cleaner = Cleaner.create()
    }
}
