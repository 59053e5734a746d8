package dev.tpcomm.engine

import java.util.concurrent.locks.LockSupport

/**
 * How a thread that polls a native library waits between polls that made no progress: it spins
 * ([spinIterations] polls with [Thread.onSpinWait]), then yields its core ([yieldIterations] polls
 * with [Thread.yield], so a thread the library started to finish the work, such as NCCL's group
 * thread, can run even where cores are scarce), then parks with an exponential backoff from 1 µs up
 * to [maxParkNanos]. It never sleeps a fixed interval per poll. The one policy of [NativeDispatcher]'s
 * progress loop and of the GPU engine's synchronous waits (`ncclInProgress`, stream drains).
 *
 * Not thread-safe: one instance per waiting loop; [reset] after progress.
 */
@dev.tpcomm.InternalTpcommApi
public class Backoff(
    private val spinIterations: Int,
    private val yieldIterations: Int,
    private val maxParkNanos: Long,
) {
    private var idle = 0

    /** Starts over (after a poll that made progress). */
    public fun reset() {
        idle = 0
    }

    /**
     * Waits once, longer the more polls in a row made no progress; a park goes through [park]
     * (the dispatcher parks itself so that a dispatch can unpark it).
     */
    public inline fun idle(park: (Long) -> Unit = { LockSupport.parkNanos(it) }) {
        when (val step = advance()) {
            SPIN -> Thread.onSpinWait()
            YIELD -> Thread.yield()
            else -> park(step)
        }
    }

    /** Counts one poll without progress: [SPIN], [YIELD], or the nanoseconds to park. */
    @PublishedApi
    internal fun advance(): Long {
        idle++
        if (idle <= spinIterations) return SPIN
        if (idle <= spinIterations + yieldIterations) return YIELD
        val shift = (idle - spinIterations - yieldIterations - 1).coerceAtMost(30)
        return (1_000L shl shift).coerceAtMost(maxParkNanos)
    }

    public companion object {
        @PublishedApi internal const val SPIN: Long = -1
        @PublishedApi internal const val YIELD: Long = -2

        /** Polls with [Thread.onSpinWait] before [spinFor] starts yielding. */
        @PublishedApi internal const val SHORT_SPINS: Int = 200

        /**
         * Waits on this thread for at most [nanos] until [done] (polls with [Thread.onSpinWait], then
         * with [Thread.yield] so that the thread finishing the work can run where cores are scarce);
         * returns [done]'s last answer. The library's one "spin before suspending": a caller whose
         * work is about to complete on another thread (a task handed to a native thread,
         * [NativeDispatcher.handOff]; an operation on the GPU engine's device thread) waits this long
         * rather than be suspended and woken. [nanos] <= 0 polls once.
         */
        public inline fun spinFor(nanos: Long, done: () -> Boolean): Boolean {
            if (done()) return true
            if (nanos <= 0) return false
            val end = System.nanoTime() + nanos
            var spins = 0
            while (!done()) {
                if (spins < SHORT_SPINS) { spins++; Thread.onSpinWait(); continue }
                if (System.nanoTime() - end >= 0) return false
                Thread.yield()
            }
            return true
        }

        /**
         * For a thread waiting on a host thread the library started (a non-blocking `ncclGroupEnd`,
         * init, split, finalize): a short spin, then up to 4096 yields before parking. Measured with
         * `scripts/gpu/nonblocking_cost.cc` on a 2-core machine (medians of 21 rounds, three runs): a
         * group waited for this way costs 35-37 µs, by pure yielding 47-49 µs, by pure spinning
         * 92-107 µs, by spinning 1000 polls then sleeping 100 µs (the engine's wait before) 115-174 µs
         * (docs/gpu.md).
         */
        public fun forLibraryThread(): Backoff = Backoff(spinIterations = 100, yieldIterations = 4_096, maxParkNanos = 100_000)
    }
}
