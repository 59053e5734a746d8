package dev.tpcomm.gpu

import dev.tpcomm.coroutines.NativeDispatcher
import java.util.concurrent.atomic.AtomicInteger

/**
 * The one native thread of a device's communicators: a communicator and the children split from it
 * share it, so that every NCCL launch for that device comes from one host thread in one order
 * (NVIDIA/nccl `docs/userguide/source/usage/communicators.rst`:302-305, "Using multiple NCCL
 * communicators concurrently": the order of host-side launches must match on every device, "most
 * easily accomplished by using a deterministic order issued from a single host thread per-device").
 * Closed when the last communicator using it releases it. Thread-safe.
 */
internal class SharedDispatcher(val dispatcher: NativeDispatcher) {
    private val refs = AtomicInteger(1)

    /** One more communicator uses the thread. */
    fun retain(): SharedDispatcher {
        refs.incrementAndGet()
        return this
    }

    /** A communicator is done with the thread; the last one closes it. */
    fun release() {
        if (refs.decrementAndGet() == 0) dispatcher.close()
    }
}
