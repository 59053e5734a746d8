package dev.tpcomm.coroutines.local

import java.util.concurrent.atomic.AtomicInteger
import java.util.concurrent.atomic.AtomicLong

/**
 * Work split into [units] independent pieces, run by the calling thread together with the
 * [KernelPool] helpers. Pieces are claimed atomically, so the caller never waits for a helper that
 * has not started: it runs unclaimed pieces itself and only waits for pieces already running on
 * another thread (which never block). Hence no deadlock, whatever threads the callers use. The
 * first exception of a piece is rethrown by [execute] after all pieces ended.
 *
 * The caller claims from the first piece up, the helpers from the last piece down: with one helper
 * (a 2-core machine) each thread takes about the same contiguous half of the buffers every call, so
 * that half stays in its core's cache from one call to the next, as in a C kernel that gives each
 * thread a fixed slice. (Claimed from one counter, the halves interleaved differently each call.)
 */
internal abstract class ParallelWork(private val units: Int) {
    /** The unclaimed pieces `[low, high)`: low in the lower 32 bits, high in the upper. */
    private val bounds = AtomicLong(units.toLong() shl 32)
    private val finished = AtomicInteger()
    @Volatile private var error: Throwable? = null

    /** Runs piece [unit]; called at most once per piece, from any thread. */
    abstract fun runUnit(unit: Int)

    /** Runs unclaimed pieces, the last first (a helper); returns false once every piece is claimed. */
    fun help(): Boolean {
        drain(fromEnd = true)
        return false
    }

    /** The next unclaimed piece from the front or from the end, or -1 when none is left. */
    private fun claim(fromEnd: Boolean): Int {
        while (true) {
            val b = bounds.get()
            val low = (b and 0xFFFF_FFFFL).toInt()
            val high = (b ushr 32).toInt()
            if (low >= high) return -1
            val next = if (fromEnd) (high - 1).toLong() shl 32 or low.toLong() else high.toLong() shl 32 or (low + 1).toLong()
            if (bounds.compareAndSet(b, next)) return if (fromEnd) high - 1 else low
        }
    }

    private fun drain(fromEnd: Boolean) {
        while (true) {
            val u = claim(fromEnd)
            if (u < 0) return
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
        drain(fromEnd = false)
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
