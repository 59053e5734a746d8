package dev.tpcomm.spi

import dev.tpcomm.Device
import java.lang.foreign.MemorySegment

/**
 * Synchronous copies between host memory and GPU memory, which a backend that only moves host
 * memory (MPI without CUDA support) uses to stage device tensors: copy the inputs to host memory,
 * run the operation there, copy the results back.
 *
 * Implementations are found through [DeviceStagingRegistry] (registered by hand, or offered by a
 * [DeviceStagingProvider] on the classpath; comm-nccl offers one for CUDA, comm-rccl one for HIP).
 *
 * **Ordering.** A copy neither waits for nor orders itself after work the caller queued on its own
 * streams: the caller must have waited for the work that writes a tensor before handing it over,
 * exactly as with a CUDA-aware MPI. When a copy method returns, the copy has completed.
 *
 * **Thread-safety.** Implementations are thread-safe: any thread may call any method at any time.
 * A copy may change which device is current on the calling thread.
 *
 * **Failure.** A copy that the GPU runtime refuses or that fails throws [IllegalStateException]
 * naming the runtime call and its error string; the destination then holds undefined bytes.
 * A device this staging does not [accept][accepts] or a negative byte count throws
 * [IllegalArgumentException] before anything is copied.
 */
public interface DeviceStaging {
    /** A short name for messages, e.g. `CUDA runtime staging`. */
    public val name: String

    /** True when this staging can copy to and from memory of [device]. Cheap; never throws. */
    public fun accepts(device: Device): Boolean

    /**
     * Copies [bytes] bytes from device address [source] on [device] into [destination] (host
     * memory of at least [bytes] bytes) and returns when they are there.
     */
    public fun copyToHost(device: Device, source: Long, destination: MemorySegment, bytes: Long)

    /**
     * Copies the first [bytes] bytes of [source] (host memory) to device address [destination] on
     * [device] and returns when the copy has completed.
     */
    public fun copyToDevice(device: Device, source: MemorySegment, destination: Long, bytes: Long)
}
