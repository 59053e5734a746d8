package dev.tpcomm.coroutines.local

import kotlinx.coroutines.Dispatchers
import java.util.concurrent.atomic.AtomicInteger
import kotlin.coroutines.EmptyCoroutineContext

/**
 * Work split into [units] independent pieces, run by the calling thread together with helper tasks
 * on [Dispatchers.Default]. Pieces are claimed from an atomic counter, so the caller never waits for
 * a helper that has not started: it runs unclaimed pieces itself and only waits for pieces already
 * running on another thread. Hence no deadlock even when every Default thread is the caller of such
 * work. The first exception of a piece is rethrown by [execute] after all pieces ended.
 */
internal abstract class ParallelWork(private val units: Int) : Runnable {
    private val next = AtomicInteger()
    private val finished = AtomicInteger()
    @Volatile private var error: Throwable? = null

    /** Runs piece [unit]; called at most once per piece, from any thread. */
    abstract fun runUnit(unit: Int)

    override fun run() = drain()

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

    /** Runs every piece with up to [helpers] helper tasks; returns when all pieces are done. */
    fun execute(helpers: Int) {
        val h = minOf(helpers, units - 1)
        // One task more than helpers wanted: dispatched from a Default worker, the most recent task
        // waits in that worker's own slot (others may steal it only after ~100 µs), while the earlier
        // ones sit in its queue where idle workers take them at once. The spare finds nothing to do.
        if (h > 0) for (i in 0..h) Dispatchers.Default.dispatch(EmptyCoroutineContext, this)
        drain()
        var spins = 0
        while (finished.get() < units) {
            if (++spins < 2000) Thread.onSpinWait() else Thread.yield()
        }
        error?.let { throw it }
    }

    companion object {
        /** Threads that run big kernels: the caller plus helpers. `-Dtpcomm.local.threads=N` overrides. */
        val parallelism: Int = Integer.getInteger("tpcomm.local.threads", Runtime.getRuntime().availableProcessors()).coerceAtLeast(1)
    }
}
