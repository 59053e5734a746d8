package dev.tpcomm.gpu

/**
 * Frees an output's device memory, once: at the tensor's first `close()` (after the operations in
 * flight on it) or, if it was never closed, from the Cleaner once it is unreachable (the tensor owns
 * this action: `Tensor.wrapDeviceOwned`, whose Cleanable runs it at most once). Ordered after the
 * work queued on [consumer] (the producer stream of the call that made it, the stream the caller
 * reads outputs on) by then: on the device's native thread ([DeviceMemoryBudget.queueFree], which
 * also issues it while an allocation waits at the budget), an event on [consumer] that [stream]
 * waits for, then the block goes back to the device's [DeviceOutputPool] for later work on [stream]
 * (or, once [stream]'s communicator closed, `cudaFreeAsync` on [stream], whose destruction waits for
 * this last free: [DeviceThread.streamUnused]). Without that order the pool could hand the block to the next
 * allocation while a kernel still reads it (PyTorch's `recordStream` exists for this;
 * docs/nccl-semantics.md C7). After the thread ended, on the calling thread with the tensor's device
 * made current (and the caller's current device restored), `cudaFreeAsync` on [consumer] itself.
 * [disarm]ed (by a call that failed after it was issued: the device may still write the memory),
 * it frees nothing and the bytes stay counted. It never references the tensor.
 *
 * Thread-safety: [disarm] from any thread; [run] once (the tensor's Cleanable), from any thread;
 * [freeOnThread] on the native thread.
 */
internal class DeviceFree(
    val runtime: DeviceRuntime,
    val memory: DeviceMemoryBudget,
    val device: Int,
    val stream: Long,
    val ptr: Long,
    /** The allocation's size, counted by [memory]. */
    val bytes: Long,
    val consumer: Long,
) : Runnable {
    @Volatile private var armed = true

    /** Leaves the memory allocated (read on the native thread, where the failing call disarms it). */
    fun disarm() {
        armed = false
    }

    override fun run() {
        if (memory.queueFree(this)) return
        if (!armed) return
        val previous = IntArray(1)
        val restore = runtime.getDevice(previous) == DeviceRuntime.SUCCESS
        runtime.setDevice(device)
        runtime.freeAsync(ptr, if (consumer == NcclCommunicator.NO_PRODUCER_STREAM) NcclCommunicator.LEGACY_DEFAULT_STREAM else consumer)
        if (restore && previous[0] != device) runtime.setDevice(previous[0])
        memory.releasedAfterEnd(bytes)
    }

    /**
     * On the native thread: the free ordered on [stream] after the consumer's work, then the block back
     * to the device's pool ([DeviceMemoryBudget.recycle]: reused by later work on [stream], or freed
     * with `cudaFreeAsync` on it when its communicator closed).
     */
    fun freeOnThread() {
        if (!armed) return
        if (consumer != NcclCommunicator.NO_PRODUCER_STREAM) {
            val e = LongArray(1)
            if (runtime.eventCreateDisableTiming(e) == DeviceRuntime.SUCCESS) {
                runtime.eventRecord(e[0], consumer)
                runtime.streamWaitEvent(stream, e[0])
                runtime.eventDestroy(e[0]) // released by the runtime once the recorded work completed
            }
        }
        memory.recycle(ptr, bytes, stream)
    }
}
