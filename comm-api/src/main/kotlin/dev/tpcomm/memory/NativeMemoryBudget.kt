package dev.tpcomm.memory

import java.util.concurrent.atomic.AtomicLong

/**
 * The count of native host bytes tpcomm holds for tensors, against [limit]: every slab of the
 * pool (counted whole when created, whether its blocks are in use or not, and released when the
 * slab goes back to the system) and every large tensor's arena. Counting slabs, not tensors, keeps
 * the pool's allocate/free path free of any shared counter.
 *
 * [tryReserve] is the optimistic step of [HostMemoryPool.reserve], modelled on
 * `java.nio.Bits.tryReserveMemory`. Thread-safe (one atomic counter).
 */
internal class NativeMemoryBudget(
    /** The budget in bytes ([Long.MAX_VALUE]: unlimited). */
    @JvmField val limit: Long,
    /** Where [limit] came from, in words, for messages (`-Dtpcomm.memory.budget=1g`, ...). */
    @JvmField val source: String,
    /** Set when the configured value is not a size: every reservation then fails with it. */
    @JvmField val configError: String? = null,
) {
    private val reserved = AtomicLong()

    /** Bytes currently counted. */
    fun reserved(): Long = reserved.get()

    /** Counts [bytes] if they fit under [limit]; false (nothing counted) otherwise. */
    fun tryReserve(bytes: Long): Boolean {
        while (true) {
            val current = reserved.get()
            if (bytes > limit - current) return false
            if (reserved.compareAndSet(current, current + bytes)) return true
        }
    }

    /** Stops counting [bytes] that [tryReserve] counted. */
    fun release(bytes: Long) {
        reserved.addAndGet(-bytes)
    }

    companion object {
        /** The budget this JVM's settings give ([HostMemoryBudgetSettings]). */
        fun fromEnvironment(): NativeMemoryBudget {
            val r = HostMemoryBudgetSettings.fromEnvironment()
            return NativeMemoryBudget(r.bytes, r.source, r.error)
        }
    }
}
