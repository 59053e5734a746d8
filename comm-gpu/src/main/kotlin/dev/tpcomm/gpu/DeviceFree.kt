package dev.tpcomm.gpu

/**
 * Frees an output's device memory once its tensor is unreachable, ordered after the work queued
 * on [consumer] (the producer stream of the call that made it, the stream the caller reads
 * outputs on) by then: on the device's native thread, an event on [consumer] that [stream] waits
 * for, then `cudaFreeAsync` on [stream] (kept alive until the thread ends). Without that order
 * the pool could hand the block to the next allocation while a kernel still reads it (PyTorch's
 * `recordStream` exists for this; docs/nccl-semantics.md C7). After the thread ended, from the
 * Cleaner thread with the tensor's device made current, `cudaFreeAsync` on [consumer] itself.
 * [disarm]ed (by a call that failed after it was issued: the device may still write the memory),
 * it frees nothing. It never references the tensor.
 *
 * Role: the Cleaner action of one output tensor [NcclCommunicator] allocated. Thread-safety: [disarm]
 * from any thread, [run] once from the Cleaner's. Lifetime: registered with [CLEANER] by the
 * communicator's allocation, owned by the Cleaner from then on.
 */
internal class DeviceFree(
    val runtime: DeviceRuntime,
    val thread: DeviceThread,
    val device: Int,
    val stream: Long,
    val ptr: Long,
    val consumer: Long,
) : Runnable {
    @Volatile private var armed = true

    /** Leaves the memory allocated (read on the native thread, where the failing call disarms it). */
    fun disarm() {
        armed = false
    }

    override fun run() {
        val onThread = thread.runOnThread(Runnable {
            if (!armed) return@Runnable
            if (consumer != NcclCommunicator.NO_PRODUCER_STREAM) {
                val e = LongArray(1)
                if (runtime.eventCreateDisableTiming(e) == DeviceRuntime.SUCCESS) {
                    runtime.eventRecord(e[0], consumer)
                    runtime.streamWaitEvent(stream, e[0])
                    runtime.eventDestroy(e[0]) // released by the runtime once the recorded work completed
                }
            }
            runtime.freeAsync(ptr, stream)
        })
        if (!onThread && armed) {
            runtime.setDevice(device)
            runtime.freeAsync(ptr, if (consumer == NcclCommunicator.NO_PRODUCER_STREAM) NcclCommunicator.LEGACY_DEFAULT_STREAM else consumer)
        }
    }

    companion object {
        /** The Cleaner that runs the output frees of every communicator of the process. */
        val CLEANER: java.lang.ref.Cleaner = java.lang.ref.Cleaner.create()
    }
}
