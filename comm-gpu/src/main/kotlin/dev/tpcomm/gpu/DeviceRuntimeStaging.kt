package dev.tpcomm.gpu

import dev.tpcomm.Device
import dev.tpcomm.spi.DeviceStaging
import java.lang.foreign.MemorySegment
import java.util.concurrent.ConcurrentHashMap

/**
 * A [DeviceStaging] over a [DeviceRuntime] (CUDA, HIP, or the simulated platform), for backends
 * that stage device tensors through host memory (the MPI backend without CUDA-aware MPI).
 *
 * Each copy makes the tensor's device current on the calling thread (`setDevice`), queues the copy
 * on a non-blocking stream this staging owns for that device (created on first use, kept until
 * [close]), records an event after it and waits for the event. Copies to one device run one at a
 * time; copies to different devices run in parallel. The stream does not wait for the caller's
 * streams: the caller must have waited for the work that writes a tensor before copying it.
 *
 * Thread-safe. A runtime error throws [IllegalStateException] with the call, the device, the error
 * code and the runtime's `getErrorString`; the stream stays usable for the next copy (unless the
 * runtime's error is sticky, as CUDA's are after a fault). Bad arguments throw
 * [IllegalArgumentException] before any runtime call.
 *
 * @param accepted the devices this staging copies for (see [cuda] and [rocm]).
 */
public class DeviceRuntimeStaging(
    private val runtime: DeviceRuntime,
    private val accepted: (Device) -> Boolean,
) : DeviceStaging, AutoCloseable {
    private val lanes = ConcurrentHashMap<Int, Lane>()

    @Volatile private var closed = false

    /** One device's stream and event; every field is guarded by the lane's monitor. */
    private class Lane(val index: Int) {
        var stream = 0L
        var event = 0L
    }

    override val name: String get() = "${runtime.platformName} runtime staging"

    override fun accepts(device: Device): Boolean = accepted(device)

    override fun copyToHost(device: Device, source: Long, destination: MemorySegment, bytes: Long) {
        checkArguments(device, destination, bytes)
        copy(device, destination.address(), source, bytes, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, "device to host")
    }

    override fun copyToDevice(device: Device, source: MemorySegment, destination: Long, bytes: Long) {
        checkArguments(device, source, bytes)
        copy(device, destination, source.address(), bytes, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, "host to device")
    }

    /**
     * Destroys the streams and events this staging created (each on its device). Idempotent; later
     * copies throw [IllegalStateException]. Errors of the destroy calls are ignored.
     */
    override fun close() {
        closed = true
        for (lane in lanes.values) {
            synchronized(lane) {
                if (lane.stream != 0L) {
                    runtime.setDevice(lane.index)
                    runtime.eventDestroy(lane.event)
                    runtime.streamDestroy(lane.stream)
                    lane.stream = 0L
                    lane.event = 0L
                }
            }
        }
    }

    private fun checkArguments(device: Device, host: MemorySegment, bytes: Long) {
        require(accepts(device)) { "$name does not copy for $device; register a staging for it" }
        require(bytes >= 0) { "$name: byte count $bytes is negative" }
        require(host.isNative) { "$name: the host memory must be a native segment (off the JVM heap), got a heap segment" }
        require(host.byteSize() >= bytes) { "$name: the host segment holds ${host.byteSize()} bytes, fewer than the $bytes to copy" }
    }

    private fun copy(device: Device, dst: Long, src: Long, bytes: Long, kind: Int, direction: String) {
        if (bytes == 0L) return
        val index = deviceIndex(device)
        val lane = lanes.computeIfAbsent(index) { Lane(it) }
        synchronized(lane) {
            check(!closed) { "$name is closed" }
            call(runtime.setDevice(index), "setDevice", index)
            if (lane.stream == 0L) open(lane)
            call(runtime.memcpyAsync(dst, src, bytes, kind, lane.stream), "memcpyAsync ($direction, $bytes bytes)", index)
            call(runtime.eventRecord(lane.event, lane.stream), "eventRecord", index)
            call(runtime.eventSynchronize(lane.event), "eventSynchronize (waiting for the $direction copy)", index)
        }
    }

    private fun open(lane: Lane) {
        val handle = LongArray(1)
        call(runtime.streamCreateNonBlocking(handle), "streamCreateWithFlags", lane.index)
        val stream = handle[0]
        val rc = runtime.eventCreateDisableTiming(handle)
        if (rc != DeviceRuntime.SUCCESS) {
            runtime.streamDestroy(stream)
            call(rc, "eventCreateWithFlags", lane.index)
        }
        lane.stream = stream
        lane.event = handle[0]
    }

    private fun call(code: Int, what: String, index: Int) {
        check(code == DeviceRuntime.SUCCESS) {
            "${runtime.platformName} $what on device $index failed with error $code: ${runtime.getErrorString(code)}"
        }
    }

    public companion object {
        /** A staging for CUDA devices ([Device.Cuda]) through [runtime]. */
        @JvmStatic
        public fun cuda(runtime: DeviceRuntime): DeviceRuntimeStaging = DeviceRuntimeStaging(runtime) { it is Device.Cuda }

        /** A staging for ROCm devices ([Device.Rocm]) through [runtime] (HIP). */
        @JvmStatic
        public fun rocm(runtime: DeviceRuntime): DeviceRuntimeStaging = DeviceRuntimeStaging(runtime) { it is Device.Rocm }
    }
}
