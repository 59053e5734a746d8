package dev.tpcomm.coroutines.local

import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.locks.LockSupport

/**
 * The threads that help the last arriver of a big collective: `parallelism - 1` daemon threads
 * (`tpcomm-local-kernel-N`), started on first use.
 *
 * Why not tasks on `Dispatchers.Default`: a task dispatched from a Default worker is not stolen by
 * another worker for about 100 µs, and a parked worker needs tens of µs to wake, both longer than a
 * 1 MiB reduction takes. These helpers instead spin for [SPIN_NANOS] after each piece of work
 * before parking, so back-to-back collectives find them awake; idle, they park and cost nothing.
 * The caller never waits for a helper to start ([ParallelWork] claims pieces atomically), so a
 * helper that is slow to wake only means less parallelism, never a stall.
 */
internal object KernelPool {
    /** How long an idle helper spins before parking. `-Dtpcomm.local.helperSpinMicros=N` overrides. */
    private val SPIN_NANOS: Long = java.lang.Long.getLong("tpcomm.local.helperSpinMicros", 200L) * 1000

    private val queue = ConcurrentLinkedQueue<ParallelWork>()

    private class Helper(index: Int) : Thread("tpcomm-local-kernel-$index") {
        @Volatile var parked = false

        init {
            isDaemon = true
        }

        override fun run() {
            var idleSince = System.nanoTime()
            while (true) {
                val w = queue.peek()
                if (w != null) {
                    if (!w.help()) queue.remove(w)
                    idleSince = System.nanoTime()
                    continue
                }
                if (System.nanoTime() - idleSince < SPIN_NANOS) {
                    Thread.onSpinWait()
                    continue
                }
                parked = true
                if (queue.isEmpty()) LockSupport.park(this)
                parked = false
                idleSince = System.nanoTime()
            }
        }
    }

    private val helpers: Array<Helper> by lazy {
        Array(ParallelWork.parallelism - 1) { Helper(it).also { h -> h.start() } }
    }

    /** Offers [work] to the helpers. */
    fun submit(work: ParallelWork) {
        val hs = helpers
        if (hs.isEmpty()) return
        queue.add(work)
        for (h in hs) if (h.parked) LockSupport.unpark(h)
    }

    /** Withdraws [work] once every piece is claimed. */
    fun done(work: ParallelWork) {
        queue.remove(work)
    }
}
