package dev.tpcomm.mpi

import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.spi.DeadlineWatchdog
import java.util.concurrent.ConcurrentHashMap

/**
 * Enforces the deadlines of blocking MPI calls, which cannot be interrupted: the core's
 * [DeadlineWatchdog] thread (never an MPI thread, so it runs while one is blocked in the library)
 * looks at the call each communicator is in (if any) every [periodMillis] ms and, once the same call has
 * been in progress for longer than the communicator's timeout, hands it to [Monitored.onDeadline]
 * (which reports and calls `MPI_Abort`).
 *
 * The communicator's thread reads no clock for this: it only publishes a token for the call in
 * progress (a release store before and after the call); the watchdog times each token from the
 * scan that first saw it. A call is therefore reported between its timeout and its timeout plus
 * one period after it started, as when the deadline was computed by the caller. Thread-safe.
 */
internal class MpiWatchdog(private val periodMillis: Long = 50) : AutoCloseable {
    /** A communicator as the watchdog sees it. */
    interface Monitored {
        /** Token of the blocking call in progress (unique per call of this communicator), or 0 when none. */
        val activeCall: Long

        /** Sequence number of the call in progress (valid while [activeCall] is unchanged). */
        val currentSequence: Long

        /** How long one blocking call may take (nanoseconds; [Long.MAX_VALUE] for no limit). */
        val callTimeoutNanos: Long

        /** Called on the watchdog thread once the call in progress passed its deadline. */
        fun onDeadline(sequence: Long)

        /** The operation in progress (blocking call or non-blocking operations in flight), for messages; null when none. */
        fun describeActiveCall(): String?

        /**
         * Called on the notice thread every period: tests for a peer's abort notice when MPI allows
         * a second thread ([MpiAbortNotices.pollFromOtherThread]).
         */
        fun pollPeerNotices()

        /**
         * This process's program failed ([MpiRuntime.programFailed]): break the communicator and tell
         * its peers, naming [description]. Called on the failing thread, before `MPI_Abort`.
         */
        fun programFailed(description: String)
    }

    /** What the watchdog thread knows about one communicator's call in progress. */
    private class Seen(var token: Long, var since: Long, var fired: Boolean)

    private val watched = ConcurrentHashMap.newKeySet<Monitored>()

    /** Touched only by the core's watchdog thread (it calls [scan]). */
    private val seen = HashMap<Monitored, Seen>()

    /**
     * A flight-recorder clock that reads no clock: the time of the core watchdog's latest scan, at
     * most about [periodMillis] ms behind [System.nanoTime] (more when the machine starves that thread).
     */
    val coarseClock: FlightRecorder.NanoClock = FlightRecorder.NanoClock { DeadlineWatchdog.coarseNanos }

    @Volatile private var registration: DeadlineWatchdog.Registration? = null

    fun register(w: Monitored) {
        watched += w
        if (registration == null) synchronized(this) {
            if (registration == null) registration = DeadlineWatchdog.register(::scan, periodMillis)
            if (noticeThread == null && !closed) {
                noticeThread = Thread.ofPlatform().daemon(true).name("tpcomm-mpi-notices").start(::pollNotices)
            }
        }
    }

    /**
     * A thread of its own that tests every communicator's abort notices each period (what
     * [Monitored.pollPeerNotices] does under `MPI_THREAD_MULTIPLE`). Not the deadline thread: an MPI
     * call there could wait on the library's lock while another thread is blocked in a collective
     * (MPICH's global critical section), and deadlines must never wait for MPI.
     */
    private fun pollNotices() {
        while (!closed) {
            for (w in watched) {
                try {
                    w.pollPeerNotices()
                } catch (t: Throwable) {
                    t.printStackTrace()
                }
            }
            try {
                Thread.sleep(periodMillis)
            } catch (_: InterruptedException) {
                return
            }
        }
    }

    @Volatile private var closed = false
    private var noticeThread: Thread? = null

    /** What the registered communicators have in progress right now (for the shutdown message). */
    fun activeCalls(): List<String> = watched.mapNotNull { it.describeActiveCall() }

    /** Every registered communicator, for [MpiRuntime.programFailed]. */
    fun communicators(): List<Monitored> = watched.toList()

    fun unregister(w: Monitored) {
        watched -= w
    }

    /** One pass on the core's watchdog thread: times each communicator's call in progress from the scan that first saw it. */
    private fun scan(now: Long) {
        seen.keys.retainAll(watched)
        for (w in watched) {
            val token = w.activeCall
            val seq = w.currentSequence
            if (token == 0L || w.activeCall != token) {
                seen.remove(w)
                continue
            }
            val s = seen[w]
            if (s == null || s.token != token) {
                seen[w] = Seen(token, now, false)
                continue
            }
            if (!s.fired && now - s.since > w.callTimeoutNanos) {
                s.fired = true
                try {
                    w.onDeadline(seq)
                } catch (t: Throwable) {
                    t.printStackTrace()
                }
            }
        }
    }

    /** Stops the deadline scans and the notice thread, waiting (briefly) until it made its last MPI call: `MPI_Finalize` follows. */
    override fun close() {
        val poller = synchronized(this) {
            closed = true
            registration?.close()
            registration = null
            noticeThread
        }
        if (poller != null && poller !== Thread.currentThread()) poller.join(1_000)
    }
}
