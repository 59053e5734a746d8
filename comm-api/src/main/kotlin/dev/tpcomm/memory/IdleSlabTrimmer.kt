package dev.tpcomm.memory

import java.lang.ref.WeakReference

/**
 * Gives a pool's idle memory back to the system over time: a daemon thread (`tpcomm-memory-trimmer`,
 * one per pool, started the first time the pool keeps a wholly free slab) that, every
 * [idleReleaseMillis] / [TICKS] ms, returns the wholly free slabs no allocation used for [TICKS]
 * ticks, so a slab idle for about [idleReleaseMillis] (at most a fifth more) is freed even if the
 * program allocates nothing more. A slab in steady use is never freed: an allocation from it resets
 * its count ([Slab.idleTicks]).
 *
 * The thread holds the pool weakly and ends when the pool is unreachable. [start] is a volatile
 * read once the thread runs (it sits on the free path). [idleReleaseMillis] 0 disables it.
 */
internal class IdleSlabTrimmer(pool: HostMemoryPool, private val idleReleaseMillis: Long) {
    private val pool = WeakReference(pool)

    @Volatile private var started = false

    /** Starts the thread if it is not running yet. Thread-safe. */
    fun start() {
        if (started || idleReleaseMillis <= 0) return
        synchronized(this) {
            if (started) return
            started = true
        }
        val tick = (idleReleaseMillis / TICKS).coerceAtLeast(1)
        Thread.ofPlatform().daemon(true).name("tpcomm-memory-trimmer").start { run(tick) }
    }

    private fun run(tickMillis: Long) {
        while (true) {
            try {
                Thread.sleep(tickMillis)
            } catch (_: InterruptedException) {
                return
            }
            val p = pool.get() ?: return
            p.trimEmptySlabs(TICKS)
        }
    }

    companion object {
        /** Ticks a wholly free slab stays idle before it is freed. */
        const val TICKS: Int = 5
    }
}
