package dev.tpcomm.coroutines.local

import java.util.concurrent.atomic.AtomicInteger

/**
 * Work split into [units] independent pieces, run by the calling thread together with the
 * [KernelPool] helpers. Pieces are claimed from an atomic counter, so the caller never waits for
 * a helper that has not started: it runs unclaimed pieces itself and only waits for pieces already
 * running on another thread (which never block). Hence no deadlock, whatever threads the callers use. The first exception of a piece is rethrown by [execute] after all pieces ended.
 */
internal abstract class ParallelWork(private val units: Int) {
    private val next = AtomicInteger()
    private val finished = AtomicInteger()
    @Volatile private var error: Throwable? = null

    /** Runs piece [unit]; called at most once per piece, from any thread. */
    abstract fun runUnit(unit: Int)

    /** Runs unclaimed pieces; returns false once every piece is claimed. */
    fun help(): Boolean {
        drain()
        return false
    }

    private fun drain() {
        while (true) {
            val u = next.getAndIncrement()
            if (u >= units) return
            try {
                runUnit(u)
            } catch (t: Throwable) {
                if (error == null) error = t
            } finally {
                finished.incrementAndGet()
            }
        }
    }

    /** Runs every piece, with the [KernelPool] helpers when [helpers] > 0; returns when all pieces are done. */
    fun execute(helpers: Int) {
        if (helpers > 0 && units > 1) KernelPool.submit(this)
        drain()
        if (helpers > 0 && units > 1) KernelPool.done(this)
        var spins = 0
        while (finished.get() < units) {
            if (++spins < 2000) Thread.onSpinWait() else Thread.yield()
        }
        error?.let { throw it }
    }

    companion object {
        /**
         * Threads that run big kernels: the caller plus helpers. Defaults to the processor count, at
         * most 8 (memory bandwidth is saturated well before). `-Dtpcomm.local.threads=N` overrides.
         */
        val parallelism: Int =
            Integer.getInteger("tpcomm.local.threads", minOf(8, Runtime.getRuntime().availableProcessors())).coerceAtLeast(1)
    }
}
