package dev.tpcomm.mpi

import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.locks.LockSupport

/**
 * Enforces the deadlines of blocking MPI calls, which cannot be interrupted: a daemon thread looks
 * at the call each communicator is in (if any) every [periodMillis] ms and, past its deadline,
 * hands it to [Watched.onDeadline] (which reports and calls `MPI_Abort`).
 *
 * The communicator's thread only writes two volatile fields per call ([Watched.beginCall] /
 * [Watched.endCall]), so the fast path costs nothing measurable. Thread-safe.
 */
internal class MpiWatchdog(private val periodMillis: Long = 50) : AutoCloseable {
    /** A communicator as the watchdog sees it. */
    interface Watched {
        /** Deadline (System.nanoTime) of the blocking call in progress, or 0 when none. */
        val currentDeadline: Long

        /** Sequence number of the call in progress, to fire once per call. */
        val currentSequence: Long

        /** Called on the watchdog thread once the call in progress passed its deadline. */
        fun onDeadline(sequence: Long)
    }

    private val watched = ConcurrentHashMap.newKeySet<Watched>()
    @Volatile private var closed = false
    @Volatile private var thread: Thread? = null

    fun register(w: Watched) {
        watched += w
        if (thread == null) synchronized(this) {
            if (thread == null && !closed) {
                thread = Thread.ofPlatform().daemon(true).name("tpcomm-mpi-watchdog").start(::loop)
            }
        }
    }

    fun unregister(w: Watched) {
        watched -= w
    }

    private fun loop() {
        val fired = HashMap<Watched, Long>()
        while (!closed) {
            val now = System.nanoTime()
            for (w in watched) {
                val deadline = w.currentDeadline
                val seq = w.currentSequence
                if (deadline != 0L && now - deadline > 0 && fired[w] != seq) {
                    fired[w] = seq
                    try {
                        w.onDeadline(seq)
                    } catch (t: Throwable) {
                        t.printStackTrace()
                    }
                }
            }
            LockSupport.parkNanos(periodMillis * 1_000_000)
        }
    }

    override fun close() {
        closed = true
    }
}
