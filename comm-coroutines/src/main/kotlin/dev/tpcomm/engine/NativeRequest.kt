package dev.tpcomm.engine

import dev.tpcomm.InternalTpcommApi

/**
 * An operation started in a native library (an MPI request, a recorded CUDA event, ...) whose
 * completion a [NativeDispatcher] observes by polling.
 *
 * [poll] is called only on the dispatcher's thread, never concurrently with itself. It returns
 * true once the operation has completed (it is then not called again), false while it is still
 * running, and throws to fail the operation (the waiting coroutine receives the exception).
 * Implementations keep references to every buffer the native operation may still touch, so the
 * buffers stay alive for as long as the dispatcher polls the request.
 */
@InternalTpcommApi
public fun interface NativeRequest {
    /** True once the operation has completed. Runs on the dispatcher's thread only. */
    public fun poll(): Boolean
}
