package dev.tpcomm.gpu.sim

import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.util.TreeMap

/**
 * The memory part of the simulated platform: "device" allocations in host segments behind fake
 * device addresses (at or above [DEVICE_BASE], never a real host address), and page-locked
 * ("pinned") host allocations, which are real host memory the simulated runtime can tell from
 * pageable memory (as CUDA tells `cudaHostAlloc` memory from `malloc` memory). Thread-safe.
 */
internal class SimulatedMemory(
    /** Bytes of device memory simulated device `d` has (`cudaMemGetInfo`'s total); device allocations past it fail. */
    private val capacity: (Int) -> Long = { Long.MAX_VALUE },
    private val onMisuse: (String) -> Unit = {},
) {
    class Allocation(val base: Long, val bytes: Long, val device: Int, val arena: Arena, val segment: MemorySegment) {
        /** Made by `cudaMalloc` (not stream-ordered): CUDA frees it with `cudaFree`, not `cudaFreeAsync`. */
        @Volatile var fromMalloc = false
    }

    private val lock = Any()
    private val device = TreeMap<Long, Allocation>()
    private val pinned = TreeMap<Long, Allocation>()
    /** Freed device ranges (base to size): the simulated allocator never reuses an address, so any later access is a use after free. */
    private val freed = TreeMap<Long, Long>()
    private var nextAddress = DEVICE_BASE
    /** Bytes of live device allocations per device (guarded by [lock]). */
    private val used = HashMap<Int, Long>()

    val liveDeviceAllocations: Int get() = synchronized(lock) { device.size }
    val livePinnedAllocations: Int get() = synchronized(lock) { pinned.size }

    /** Bytes of live device allocations on [onDevice]. */
    fun usedBytes(onDevice: Int): Long = synchronized(lock) { used[onDevice] ?: 0L }

    /** [onDevice]'s capacity in bytes. */
    fun capacityBytes(onDevice: Int): Long = capacity(onDevice)

    /**
     * A device allocation of [bytes] on [onDevice], or 0 when it does not fit in the device's
     * capacity (the runtime then returns `cudaErrorMemoryAllocation`). [reusable]: bytes whose
     * stream-ordered free was queued on the allocating stream and has not run yet, which the
     * allocation may count as free (CUDA's stream-ordered allocator reuses memory freed earlier on
     * the same stream: the free's stream order already guarantees that no access overlaps; CUDA
     * Runtime API, "Stream Ordered Memory Allocator", overview).
     */
    fun tryAllocate(bytes: Long, onDevice: Int, reusable: Long = 0): Long = synchronized(lock) {
        val size = bytes.coerceAtLeast(1)
        val inUse = used[onDevice] ?: 0L
        if (size > capacity(onDevice) - (inUse - reusable).coerceAtLeast(0)) return 0L
        allocate(bytes, onDevice)
    }

    /** A device allocation of [bytes] on [onDevice], whatever the capacity (test fixtures' uploads). */
    fun allocate(bytes: Long, onDevice: Int): Long = synchronized(lock) {
        val arena = Arena.ofShared()
        val size = bytes.coerceAtLeast(1)
        used.merge(onDevice, size, Long::plus)
        val seg = arena.allocate(size, 256)
        val base = nextAddress
        nextAddress += (size + 255) / 256 * 256 + 256
        device[base] = Allocation(base, size, onDevice, arena, seg)
        base
    }

    /** The allocation starting at [address], or null. */
    fun allocationAt(address: Long): Allocation? = synchronized(lock) { device[address] }

    fun release(address: Long): Boolean {
        val a = synchronized(lock) {
            device.remove(address)?.also {
                freed[it.base] = it.bytes
                used.merge(it.device, -it.bytes, Long::plus)
            }
        } ?: return false
        a.arena.close()
        return true
    }

    fun allocatePinned(bytes: Long): Long = synchronized(lock) {
        val arena = Arena.ofShared()
        val seg = arena.allocate(bytes.coerceAtLeast(1), 256)
        pinned[seg.address()] = Allocation(seg.address(), bytes.coerceAtLeast(1), -1, arena, seg)
        seg.address()
    }

    fun releasePinned(address: Long): Boolean {
        val a = synchronized(lock) { pinned.remove(address) } ?: return false
        a.arena.close()
        return true
    }

    fun isDevice(address: Long): Boolean = address >= DEVICE_BASE

    /** True when [address]..+[bytes] lies in a pinned host allocation. */
    fun isPinned(address: Long, bytes: Long): Boolean = synchronized(lock) {
        val a = pinned.floorEntry(address)?.value ?: return false
        address + bytes <= a.base + a.bytes
    }

    /** The device a device address belongs to, or null for host memory or an unknown address. */
    fun deviceOf(address: Long): Int? = if (!isDevice(address)) null else synchronized(lock) { device.floorEntry(address)?.value?.device }

    /** The host memory behind [address] (device or host), [bytes] long; throws [SimFault] for an invalid device range. */
    fun resolve(address: Long, bytes: Long): MemorySegment {
        if (!isDevice(address)) {
            if (address == 0L) throw SimFault(NCCL_INVALID_ARGUMENT, CUDA_INVALID_VALUE, "NULL pointer")
            return MemorySegment.ofAddress(address).reinterpret(bytes)
        }
        val a = synchronized(lock) { device.floorEntry(address)?.value }
        if (a == null || address + bytes > a.base + a.bytes) {
            val f = synchronized(lock) { freed.floorEntry(address) }
            if (f != null && address < f.key + f.value) {
                val what = "device memory 0x${address.toString(16)}+$bytes was used after it was freed (cudaFree/cudaFreeAsync): " +
                    "on a GPU the pool may already have handed the block to another allocation"
                onMisuse(what)
                throw SimFault(NCCL_INVALID_ARGUMENT, CUDA_INVALID_VALUE, what)
            }
            throw SimFault(NCCL_INVALID_ARGUMENT, CUDA_INVALID_VALUE, "device range 0x${address.toString(16)}+$bytes is not allocated")
        }
        return a.segment.asSlice(address - a.base, bytes)
    }

    fun checkDeviceBuffer(address: Long, bytes: Long) {
        if (bytes == 0L) return
        if (!isDevice(address)) throw SimFault(NCCL_INVALID_ARGUMENT, CUDA_INVALID_VALUE, "0x${address.toString(16)} is not a device pointer")
        resolve(address, bytes)
    }

    companion object {
        const val DEVICE_BASE: Long = 0x7E00_0000_0000_0000L
    }
}

/** A simulated failure: the NCCL code and the CUDA code it maps to. */
internal class SimFault(val nccl: Int, val cuda: Int, message: String) : RuntimeException(message)

// CUDA driver_types.h (CUDA 13.3, as the preset's cudart constants): cudaErrorInvalidValue 1,
// cudaErrorInvalidDevice 101, cudaErrorInvalidResourceHandle 400, cudaErrorLaunchFailure 719.
internal const val CUDA_INVALID_VALUE = 1
// cudaErrorMemoryAllocation = 2 (driver_types.h; hipErrorOutOfMemory is 2 as well, ROCm/HIP hip_runtime_api.h):
// what cudaMalloc and cudaMallocAsync return when the device's memory is exhausted.
internal const val CUDA_MEMORY_ALLOCATION = 2
internal const val CUDA_INVALID_DEVICE = 101
internal const val CUDA_INVALID_HANDLE = 400
internal const val CUDA_LAUNCH_FAILURE = 719
internal const val NCCL_INVALID_ARGUMENT = 4
