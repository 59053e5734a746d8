package dev.tpcomm.gpu

import java.lang.foreign.MemorySegment

/**
 * The native-thread resources of one communicator's stream ([stream]): the pool of completion
 * events, the event that orders the stream after the producer stream, the barrier's scratch word
 * on the device, and the page-locked staging buffer (cudaHostAlloc/hipHostMalloc), grown on demand
 * so that copies to it never block. Each allocation's result code goes to the caller's `check`
 * (an operation's `cuda`, which fails and aborts it).
 *
 * Role: allocation and reuse only; what runs on the stream is the operations'. Thread-safety: none,
 * native thread only. Lifetime: created by [NcclCommunicator], released by its close on the native
 * thread ([release]).
 */
internal class StreamResources(private val runtime: DeviceRuntime, private val stream: Long, private val device: Int) {
    private val events = java.util.ArrayDeque<Long>()
    private val allEvents = ArrayList<Long>()
    private var scratch = 0L
    private var pinned = 0L
    private var pinnedBytes = 0L
    private val retiredPinned = ArrayList<Long>()
    private var producerEvent = 0L

    /** A completion event from the pool, or a new one. */
    fun acquireEvent(check: (Int, String) -> Unit): Long {
        events.pollFirst()?.let { return it }
        val e = LongArray(1)
        check(runtime.eventCreateDisableTiming(e), "eventCreateWithFlags")
        allEvents += e[0]
        return e[0]
    }

    /** Returns a completed [event] to the pool. */
    fun recycleEvent(event: Long) {
        events.addLast(event)
    }

    /** The barrier's 4-byte device word, allocated (stream-ordered) on first use. */
    fun barrierScratch(check: (Int, String) -> Unit): Long {
        if (scratch == 0L) {
            val p = LongArray(1)
            check(runtime.mallocAsync(p, 4, stream), "mallocAsync")
            scratch = p[0]
        }
        return scratch
    }

    /** Makes [stream] wait for the work queued on [producer] so far (unless [NcclCommunicator.NO_PRODUCER_STREAM]). */
    fun orderAfter(producer: Long, check: (Int, String) -> Unit) {
        if (producer == NcclCommunicator.NO_PRODUCER_STREAM) return
        if (producerEvent == 0L) {
            val e = LongArray(1)
            check(runtime.eventCreateDisableTiming(e), "eventCreateWithFlags")
            producerEvent = e[0]
        }
        check(runtime.eventRecord(producerEvent, producer), "eventRecord(producerStream)")
        check(runtime.streamWaitEvent(stream, producerEvent), "streamWaitEvent")
    }

    /** Page-locked host memory of at least [bytes] (the communicator's one staging buffer, grown on demand). */
    fun staging(bytes: Long, check: (Int, String) -> Unit): MemorySegment {
        if (pinnedBytes < bytes) {
            // The old buffer may still be read by copies queued before: free it stream-ordered... cudaFreeHost
            // synchronises, so it is kept until close instead; only growth allocates.
            if (pinned != 0L) retiredPinned += pinned
            val p = LongArray(1)
            check(runtime.hostAlloc(p, bytes.coerceAtLeast(64)), "hostAlloc")
            pinned = p[0]
            pinnedBytes = bytes.coerceAtLeast(64)
        }
        return MemorySegment.ofAddress(pinned).reinterpret(pinnedBytes)
    }

    /**
     * Frees what the stream's work no longer uses: the scratch word (stream-ordered), the producer
     * event, the events; the page-locked memory only when [healthy] (after a failure the device may
     * still write it, so it is left to the process), off the native thread ([freeHostAfterStream]).
     */
    /**
     * Frees the page-locked buffers [ptrs] once the work queued on the stream is done, **off the
     * native thread**: `cudaFreeHost`/`hipHostFree` synchronise the device (ROCm/HIP
     * `hip_runtime_api.h`, `hipHostFree`: an implicit device synchronisation), which on the device's
     * shared thread would stall every other communicator of the device behind the slowest kernel. An
     * event recorded here on the stream is waited for on a short-lived daemon thread, with the device
     * made current there, which then frees the buffers and the event. When the event cannot be made,
     * the buffers are left to the process (as after a failure).
     */
    private fun freeHostAfterStream(ptrs: List<Long>) {
        if (ptrs.isEmpty()) return
        val e = LongArray(1)
        if (runtime.eventCreateDisableTiming(e) != DeviceRuntime.SUCCESS) return
        if (runtime.eventRecord(e[0], stream) != DeviceRuntime.SUCCESS) {
            runtime.eventDestroy(e[0])
            return
        }
        val event = e[0]
        Thread.ofPlatform().daemon(true).name("tpcomm-pinned-free-device$device").start {
            runtime.setDevice(device)
            runtime.eventSynchronize(event)
            for (p in ptrs) runtime.freeHost(p)
            runtime.eventDestroy(event)
        }
    }

    fun release(healthy: Boolean) {
        if (scratch != 0L) runtime.freeAsync(scratch, stream)
        scratch = 0L
        if (producerEvent != 0L) runtime.eventDestroy(producerEvent)
        producerEvent = 0L
        if (healthy) freeHostAfterStream((retiredPinned + pinned).filter { it != 0L })
        pinned = 0L
        retiredPinned.clear()
        for (e in allEvents) runtime.eventDestroy(e)
        allEvents.clear()
        events.clear()
    }
}
