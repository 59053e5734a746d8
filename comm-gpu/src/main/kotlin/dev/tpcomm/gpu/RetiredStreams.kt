package dev.tpcomm.gpu

/**
 * Streams of closed communicators that nothing can target any more (no output of theirs is alive to
 * be freed on them: [DeviceOutputPool.retire]), destroyed once their last work is done: [add]
 * records an event on the stream, [reap] destroys the stream and the event once the event completed
 * (or failed: after an abort the stream's work ends with the error). CUDA would accept the stream's
 * destruction at once ("in case the device is still doing work in the stream when
 * cudaStreamDestroy() is called, the function will return immediately and the resources associated
 * with stream will be released automatically once the device has completed all work in stream",
 * CUDA Runtime API, `cudaStreamDestroy`), but HIP's `hipStreamDestroy` "may wait for all commands
 * queued to the stream before destroying it" (ROCm/HIP `hip_runtime_api.h`), which on the device's
 * shared thread would stall every other communicator of the device behind the stream's last kernel;
 * the event keeps the destruction off the stream's critical path on both.
 *
 * [reap] runs at the device thread's turns that already touch its memory (an output's allocation or
 * free, a communicator's close); [destroyAll] when the thread ends. Thread-safety: none; native thread only.
 */
internal class RetiredStreams(private val runtime: DeviceRuntime) {
    private val streams = ArrayList<Long>()
    private val events = ArrayList<Long>()

    /** Streams waiting for their last work. */
    val size: Int get() = streams.size

    /** [stream] will never be targeted again: destroyed once its work is done ([reap]), or at once when no event can be recorded. */
    fun add(stream: Long) {
        val e = LongArray(1)
        if (runtime.eventCreateDisableTiming(e) != DeviceRuntime.SUCCESS) {
            runtime.streamDestroy(stream)
            return
        }
        if (runtime.eventRecord(e[0], stream) != DeviceRuntime.SUCCESS) {
            runtime.eventDestroy(e[0])
            runtime.streamDestroy(stream)
            return
        }
        streams += stream
        events += e[0]
    }

    /** Destroys the streams whose last work completed (or failed). */
    fun reap() {
        var i = 0
        while (i < streams.size) {
            if (runtime.eventQuery(events[i]) == DeviceRuntime.ERROR_NOT_READY) {
                i++
                continue
            }
            runtime.eventDestroy(events.removeAt(i))
            runtime.streamDestroy(streams.removeAt(i))
        }
    }

    /** The thread ends: destroys every stream now (the runtime releases it after its work) and its event. */
    fun destroyAll() {
        for (e in events) runtime.eventDestroy(e)
        for (s in streams) runtime.streamDestroy(s)
        events.clear()
        streams.clear()
    }
}
