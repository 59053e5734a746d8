package dev.tpcomm.mpi

import dev.tpcomm.Device
import dev.tpcomm.Tensor
import dev.tpcomm.spi.DeviceStaging
import java.lang.foreign.MemorySegment
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.atomic.AtomicInteger

/**
 * A [DeviceStaging] for tests whose "device" addresses are really host memory (made with
 * [onDevice]): copies are plain memory copies, counted per direction. It records every host
 * segment it was handed, so a test can check that the backend freed its temporaries, and fails
 * copies on demand ([failToHost], [failToDevice]).
 */
class HostBackedStaging(private val accepted: (Device) -> Boolean = { it.isGpu }) : DeviceStaging {
    override val name: String get() = "host-backed test staging"

    val toHost = AtomicInteger()
    val toDevice = AtomicInteger()
    private val handed = ConcurrentLinkedQueue<MemorySegment>()

    @Volatile var failToHost: String? = null

    @Volatile var failToDevice: String? = null

    override fun accepts(device: Device): Boolean = accepted(device)

    override fun copyToHost(device: Device, source: Long, destination: MemorySegment, bytes: Long) {
        require(accepts(device)) { "$device is not accepted" }
        toHost.incrementAndGet()
        handed += destination
        failToHost?.let { throw IllegalStateException(it) }
        MemorySegment.copy(MemorySegment.ofAddress(source).reinterpret(bytes), 0, destination, 0, bytes)
    }

    override fun copyToDevice(device: Device, source: MemorySegment, destination: Long, bytes: Long) {
        require(accepts(device)) { "$device is not accepted" }
        toDevice.incrementAndGet()
        handed += source
        failToDevice?.let { throw IllegalStateException(it) }
        MemorySegment.copy(source, 0, MemorySegment.ofAddress(destination).reinterpret(bytes), 0, bytes)
    }

    /** Host segments handed to copies since [reset] that are still alive (not freed). */
    val liveTemporaries: Int get() = handed.count { it.scope().isAlive }

    /** (copies to host, copies to device) since [reset]. */
    val counts: Pair<Int, Int> get() = toHost.get() to toDevice.get()

    fun reset() {
        toHost.set(0)
        toDevice.set(0)
        handed.clear()
        failToHost = null
        failToDevice = null
    }

    companion object {
        /** A "device" tensor on [device] whose address is [host]'s memory (keep [host] reachable while it is used). */
        fun onDevice(host: Tensor, device: Device = Device.Cuda(0)): Tensor =
            Tensor.wrapDevice(device, host.segment.address(), host.dtype, *host.shape.toIntArray())
    }
}
