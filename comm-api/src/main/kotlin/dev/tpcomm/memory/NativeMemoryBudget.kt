package dev.tpcomm.memory

import dev.tpcomm.InternalTpcommApi
import java.util.concurrent.atomic.AtomicLong

/**
 * A count of native bytes tpcomm holds against [limit], and the one reclaim loop every budget uses
 * ([reclaim]): the host pool's ([HostMemoryPool]: every slab, counted whole when created, and every
 * large tensor's arena; counting slabs, not tensors, keeps the pool's allocate/free path free of
 * any shared counter) and each device's (comm-gpu: the outputs its collectives allocate).
 *
 * [tryReserve] is the optimistic step of a reservation, modelled on
 * `java.nio.Bits.tryReserveMemory`. Thread-safe (one atomic counter).
 */
@InternalTpcommApi
public class NativeMemoryBudget(
    /** The budget in bytes ([Long.MAX_VALUE]: unlimited). */
    @JvmField public val limit: Long,
    /** Where [limit] came from, in words, for messages (`-Dtpcomm.memory.budget=1g`, ...). */
    @JvmField public val source: String,
    /** Set when the configured value is not a size: every reservation then fails with it. */
    @JvmField public val configError: String? = null,
) {
    private val reserved = AtomicLong()

    /** Bytes currently counted. */
    public fun reserved(): Long = reserved.get()

    /** Counts [bytes] if they fit under [limit]; false (nothing counted) otherwise. */
    public fun tryReserve(bytes: Long): Boolean {
        while (true) {
            val current = reserved.get()
            if (bytes > limit - current) return false
            if (reserved.compareAndSet(current, current + bytes)) return true
        }
    }

    /** Stops counting [bytes] that [tryReserve] counted. */
    public fun release(bytes: Long) {
        reserved.addAndGet(-bytes)
    }

    public companion object {
        /** Sleeps of the reclaiming retries: 1 + 2 + ... + 512 ms, about a second (`Bits` sleeps 9 times). */
        public const val MAX_SLEEPS: Int = 10

        /** Longest a reservation keeps reclaiming while memory is still coming back. */
        public const val MAX_RECLAIM_NANOS: Long = 5_000_000_000L

        /** The host budget this JVM's settings give ([HostMemoryBudgetSettings]). */
        internal fun fromEnvironment(): NativeMemoryBudget {
            val r = HostMemoryBudgetSettings.fromEnvironment()
            return NativeMemoryBudget(r.bytes, r.source, r.error)
        }

        /**
         * The reclaim loop of every budget, after its first [attempt] failed: [trim] (what the owner
         * can give back at once), `System.gc()` so that the cleaners of unreachable tensors give their
         * memory back, then [attempt] again with sleeps of 1, 2, 4, ... ms between tries ([MAX_SLEEPS]
         * of them, a sleep after which [inUse] fell not counted, up to [MAX_RECLAIM_NANOS] in all),
         * calling [trim] before each. Returns true once [attempt] succeeded, false as soon as [ready]
         * says the caller no longer needs the memory, null when it gave up (the caller then throws its
         * `NativeMemoryBudgetException`). An interrupt does not stop the retries; it is restored after.
         */
        public fun reclaim(attempt: () -> Boolean, trim: () -> Unit, inUse: () -> Long, ready: (() -> Boolean)? = null): Boolean? {
            trim()
            if (attempt()) return true
            var interrupted = false
            try {
                System.gc()
                val start = System.nanoTime()
                var sleepMillis = 1L
                var sleeps = 0
                while (true) {
                    if (ready != null && ready()) return false
                    if (attempt()) return true
                    trim()
                    if (attempt()) return true
                    if (sleeps >= MAX_SLEEPS || System.nanoTime() - start > MAX_RECLAIM_NANOS) return null
                    val heldBefore = inUse()
                    try {
                        Thread.sleep(sleepMillis)
                    } catch (_: InterruptedException) {
                        interrupted = true
                    }
                    if (inUse() < heldBefore) continue // the cleaners are giving memory back: wait on
                    sleepMillis = sleepMillis shl 1
                    sleeps++
                }
            } finally {
                if (interrupted) Thread.currentThread().interrupt()
            }
        }

        /** Bytes that [text] names (`512m`, `1g`, `unlimited` as [Long.MAX_VALUE]), or null when it is not a size. */
        public fun parseSize(text: String): Long? = HostMemoryBudgetSettings.parseSize(text)

        /** [bytes] as `512.0 MiB`, `1.0 GiB` (or `unlimited`). */
        public fun formatBytes(bytes: Long): String = HostMemoryBudgetSettings.formatBytes(bytes)

        /** A round size, at least twice [needed], written as the settings take it (`256m`, `2g`). */
        public fun suggestedBudget(needed: Long): String {
            var b = 1L shl 20
            while (b < needed * 2 && b < (1L shl 62)) b = b shl 1
            return if (b >= 1L shl 30) "${b shr 30}g" else "${b shr 20}m"
        }
    }
}
