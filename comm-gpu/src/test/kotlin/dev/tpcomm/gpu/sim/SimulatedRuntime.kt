package dev.tpcomm.gpu.sim

import dev.tpcomm.gpu.DeviceRuntime
import java.lang.foreign.MemorySegment
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.CountDownLatch
import java.util.concurrent.LinkedBlockingQueue
import java.util.concurrent.atomic.AtomicLong

/**
 * The runtime part of the simulated platform ([DeviceRuntime], as CUDA's and HIP's runtimes behave):
 *
 * - **Current device per thread.** A thread that never called [setDevice] acts on device 0, as
 *   CUDA's primary context does (`cudaGetDevice` returns 0; every call creates or uses device 0's
 *   context), and the platform records it ([SimulatedGpuPlatform.implicitDeviceCalls]): on a real
 *   machine that opens a context on GPU 0 from every rank. Freeing memory of another device than
 *   the current one is recorded as misuse.
 * - **Streams** are threads that run their work in order; an event completes when the work
 *   recorded before it ran.
 * - **Pageable copies block.** `cudaMemcpyAsync` to or from pageable host memory returns only when
 *   the stream has reached the copy (CUDA Runtime API, "API synchronization behavior": "for
 *   transfers from device memory to pageable host memory, the function will return only once the
 *   copy has completed"; ROCm/HIP `include/hip/hip_runtime_api.h`, `hipMemcpyAsync`: pageable
 *   host memory is staged synchronously). Copies with page-locked memory ([hostAlloc]) do not block.
 * - **`free` waits for every stream of its device** (cudaFree and hipFree synchronise the device;
 *   HIP's header says so at `hipFree`); [freeAsync] is stream-ordered and never blocks; memory used
 *   after its free (by work of a stream not ordered after it) is recorded (docs/nccl-semantics.md C7).
 * - **The legacy default stream** (handle 0) is a stream of the calling thread's current device that
 *   runs its work in order; streams made by [streamCreateNonBlocking] are not ordered with it (C2, C11).
 * - **Destroyed handles**: a stream or event used after its destroy is recorded (C3).
 *
 * docs/nccl-semantics.md is the specification (rows C1-C11); `SimulatedPlatformSpecTest` checks each row.
 */
internal class SimulatedRuntime(private val platform: SimulatedGpuPlatform) : DeviceRuntime {
    private val memory get() = platform.memory
    private val current = ThreadLocal<Int?>()

    inner class SimStream(val device: Int) {
        private val queue = LinkedBlockingQueue<() -> Unit>()
        @Volatile var error = 0
        @Volatile private var running = true
        /** Bytes of [freeAsync]s queued on this stream that have not run yet (reusable by [mallocAsync] on it). */
        val pendingFreeBytes = AtomicLong()
        /** Tasks enqueued minus tasks finished: 0 when the stream is idle. */
        val pending = AtomicLong()
        /** NCCL kernels launched on this stream so far (N17a, [SimulatedLifetimes.launch]). */
        val ncclLaunches = AtomicLong()
        /** Per other stream, how many of its NCCL kernels this stream is ordered after (through events it waited for; N17a). */
        val orderedAfter = ConcurrentHashMap<SimStream, Long>()
        private val thread = Thread.ofPlatform().daemon(true).name("sim-gpu$device-stream").start {
            while (running) {
                val task = try { queue.take() } catch (_: InterruptedException) { break }
                try {
                    task()
                } catch (f: SimFault) {
                    if (error == 0) error = f.cuda
                } catch (_: InterruptedException) {
                    break
                } catch (t: Throwable) {
                    if (error == 0) error = CUDA_LAUNCH_FAILURE
                } finally {
                    pending.decrementAndGet()
                }
            }
        }

        fun enqueue(task: () -> Unit) {
            pending.incrementAndGet()
            queue.add(task)
        }

        fun stop() { running = false; thread.interrupt() }
    }

    class SimEvent {
        @Volatile var done: CountDownLatch? = null
        @Volatile var stream: SimStream? = null
        /** The ordering the event carries (N17a): its stream's NCCL launches at the record, and what that stream was ordered after. */
        @Volatile var order: Map<SimStream, Long> = emptyMap()
    }

    val streams: MutableSet<SimStream> = ConcurrentHashMap.newKeySet()

    /** `cudaMallocAsync` calls so far (each one a trip to the runtime's allocator; issue 34's pool makes repeating sizes reuse blocks). */
    val mallocAsyncCalls = AtomicLong()
    private val legacy = ConcurrentHashMap<Int, SimStream>()

    /** [device]'s legacy default stream (handle 0), created on first use. */
    fun legacyStream(device: Int): SimStream = legacy.computeIfAbsent(device) { d -> SimStream(d).also { streams += it } }

    /** The stream behind [handle]: 0 is the calling thread's device's legacy default stream. */
    private fun stream(handle: Long, call: String): SimStream? =
        if (handle == 0L) legacyStream(currentDevice(call)) else platform.lookup<SimStream>(handle)

    /** The calling thread's device, recording the call when the thread never set one. */
    fun currentDevice(call: String): Int {
        val d = current.get()
        if (d != null) return d
        platform.recordImplicitDevice("$call on thread '${Thread.currentThread().name}' with no current device acted on device 0")
        return 0
    }

    override val platformName: String get() = "simulated GPU runtime"

    override fun getDeviceCount(count: IntArray): Int { count[0] = platform.deviceCount; return 0 }

    override fun setDevice(device: Int): Int {
        if (device !in 0 until platform.deviceCount) return CUDA_INVALID_DEVICE
        current.set(device)
        return 0
    }

    override fun getDevice(device: IntArray): Int { device[0] = current.get() ?: 0; return 0 }

    override fun streamCreateNonBlocking(stream: LongArray): Int {
        val s = SimStream(currentDevice("streamCreateWithFlags"))
        streams += s
        stream[0] = platform.handle(s)
        return 0
    }

    override fun streamDestroy(stream: Long): Int {
        if (stream == 0L) return CUDA_INVALID_HANDLE
        val s = platform.remove<SimStream>(stream, "cudaStreamDestroy") ?: return CUDA_INVALID_HANDLE
        s.enqueue { streams -= s; s.stop() }
        return 0
    }

    override fun eventCreateDisableTiming(event: LongArray): Int { event[0] = platform.handle(SimEvent()); return 0 }

    override fun eventDestroy(event: Long): Int = if (platform.remove<SimEvent>(event, "cudaEventDestroy") != null) 0 else CUDA_INVALID_HANDLE

    override fun eventRecord(event: Long, stream: Long): Int {
        val e = platform.lookup<SimEvent>(event) ?: return CUDA_INVALID_HANDLE
        val s = stream(stream, "eventRecord") ?: return CUDA_INVALID_HANDLE
        val latch = CountDownLatch(1)
        e.done = latch
        e.stream = s
        e.order = HashMap(s.orderedAfter).also { it[s] = s.ncclLaunches.get() }
        s.enqueue { latch.countDown() }
        return 0
    }

    override fun eventQuery(event: Long): Int {
        val e = platform.lookup<SimEvent>(event) ?: return CUDA_INVALID_HANDLE
        e.stream?.error?.let { if (it != 0) return it }
        val d = e.done ?: return 0
        return if (d.count == 0L) 0 else DeviceRuntime.ERROR_NOT_READY
    }

    override fun eventSynchronize(event: Long): Int {
        val e = platform.lookup<SimEvent>(event) ?: return CUDA_INVALID_HANDLE
        e.done?.await()
        return e.stream?.error ?: 0
    }

    override fun streamWaitEvent(stream: Long, event: Long): Int {
        val e = platform.lookup<SimEvent>(event) ?: return CUDA_INVALID_HANDLE
        val s = stream(stream, "streamWaitEvent") ?: return CUDA_INVALID_HANDLE
        val latch = e.done ?: return 0
        for ((other, n) in e.order) if (other !== s) s.orderedAfter.merge(other, n) { a, b -> maxOf(a, b) }
        s.enqueue { latch.await() }
        return 0
    }

    override fun malloc(ptr: LongArray, bytes: Long): Int {
        if (bytes < 0) return CUDA_INVALID_VALUE
        val p = memory.tryAllocate(bytes, currentDevice("malloc"))
        if (p == 0L) return CUDA_MEMORY_ALLOCATION
        memory.allocationAt(p)?.fromMalloc = true
        ptr[0] = p
        return 0
    }

    override fun free(ptr: Long): Int {
        if (ptr == 0L) return 0
        val a = memory.allocationAt(ptr) ?: return CUDA_INVALID_VALUE
        val device = currentDevice("free")
        if (device != a.device) platform.recordMisuse("free of device ${a.device} memory with device $device current (a context switch on a real GPU)")
        // cudaFree/hipFree synchronise the device: wait until every stream of it is idle.
        for (s in streams.filter { it.device == a.device }) {
            val done = CountDownLatch(1)
            s.enqueue { done.countDown() }
            done.await()
        }
        return if (memory.release(ptr)) 0 else CUDA_INVALID_VALUE
    }

    /** `cudaMemGetInfo`: the current device's capacity less its live allocations, and its capacity. */
    override fun memGetInfo(free: LongArray, total: LongArray): Int {
        val d = currentDevice("memGetInfo")
        total[0] = memory.capacityBytes(d)
        free[0] = (total[0] - memory.usedBytes(d)).coerceAtLeast(0)
        return 0
    }

    override fun mallocAsync(ptr: LongArray, bytes: Long, stream: Long): Int {
        val s = stream(stream, "mallocAsync") ?: return CUDA_INVALID_HANDLE
        if (bytes < 0) return CUDA_INVALID_VALUE
        mallocAsyncCalls.incrementAndGet()
        val p = memory.tryAllocate(bytes, s.device, s.pendingFreeBytes.get())
        if (p == 0L) return CUDA_MEMORY_ALLOCATION // cudaMallocAsync's exhaustion error (CUDA Runtime API, cudaMallocAsync's returns)
        ptr[0] = p
        return 0
    }

    override fun freeAsync(ptr: Long, stream: Long): Int {
        if (ptr == 0L) return 0
        val s = stream(stream, "freeAsync") ?: return CUDA_INVALID_HANDLE
        val a = memory.allocationAt(ptr) ?: return CUDA_INVALID_VALUE
        if (stream == 0L && s.device != a.device) platform.recordMisuse("freeAsync of device ${a.device} memory on device ${s.device}'s legacy stream")
        // CUDA pairs cudaFreeAsync with stream-ordered allocations (cudaMallocAsync); cudaMalloc's memory is freed with cudaFree
        // (CUDA Programming Guide, "Stream-Ordered Memory Allocator").
        if (a.fromMalloc) platform.recordMisuse("cudaFreeAsync of memory from cudaMalloc (pair cudaMalloc with cudaFree, cudaMallocAsync with cudaFreeAsync)")
        s.pendingFreeBytes.addAndGet(a.bytes)
        s.enqueue {
            memory.release(ptr)
            s.pendingFreeBytes.addAndGet(-a.bytes)
        }
        return 0
    }

    override fun hostAlloc(ptr: LongArray, bytes: Long): Int {
        ptr[0] = memory.allocatePinned(bytes)
        return 0
    }

    override fun freeHost(ptr: Long): Int {
        platform.pinnedFreeLog += Thread.currentThread().name
        return if (ptr == 0L || memory.releasePinned(ptr)) 0 else CUDA_INVALID_VALUE
    }

    override fun memcpyAsync(dst: Long, src: Long, bytes: Long, kind: Int, stream: Long): Int {
        val s = stream(stream, "memcpyAsync") ?: return CUDA_INVALID_HANDLE
        try { memory.resolve(dst, bytes); memory.resolve(src, bytes) } catch (f: SimFault) { return f.cuda }
        s.enqueue { MemorySegment.copy(memory.resolve(src, bytes), 0, memory.resolve(dst, bytes), 0, bytes) }
        blockIfPageable(s, dst, bytes)
        blockIfPageable(s, src, bytes)
        return 0
    }

    /** A copy with pageable host memory returns only once the stream has done it. */
    private fun blockIfPageable(s: SimStream, address: Long, bytes: Long) {
        if (bytes == 0L || memory.isDevice(address) || memory.isPinned(address, bytes)) return
        platform.pageableCopies.incrementAndGet()
        val done = CountDownLatch(1)
        s.enqueue { done.countDown() }
        done.await()
    }

    override fun memcpy2DAsync(dst: Long, dstPitch: Long, src: Long, srcPitch: Long, width: Long, height: Long, kind: Int, stream: Long): Int {
        val s = stream(stream, "memcpy2DAsync") ?: return CUDA_INVALID_HANDLE
        if (width > dstPitch || width > srcPitch) return CUDA_INVALID_VALUE
        if (height == 0L || width == 0L) return 0
        val dstSpan = (height - 1) * dstPitch + width
        val srcSpan = (height - 1) * srcPitch + width
        try { memory.resolve(dst, dstSpan); memory.resolve(src, srcSpan) } catch (f: SimFault) { return f.cuda }
        s.enqueue {
            val d = memory.resolve(dst, dstSpan)
            val from = memory.resolve(src, srcSpan)
            for (row in 0 until height) MemorySegment.copy(from, row * srcPitch, d, row * dstPitch, width)
        }
        return 0
    }

    override fun getErrorString(error: Int): String = when (error) {
        CUDA_INVALID_VALUE -> "invalid argument (simulated)"
        CUDA_MEMORY_ALLOCATION -> "out of memory (simulated)"
        CUDA_INVALID_DEVICE -> "invalid device ordinal (simulated)"
        CUDA_INVALID_HANDLE -> "invalid resource handle (simulated)"
        CUDA_LAUNCH_FAILURE -> "unspecified launch failure (simulated)"
        DeviceRuntime.ERROR_NOT_READY -> "device not ready (simulated)"
        else -> "error $error (simulated)"
    }
}
