package dev.tpcomm.engine

import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.coroutines.FlightRecorder
import java.lang.ref.WeakReference
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.locks.LockSupport

/**
 * The one deadline watchdog of the process: a daemon platform thread that calls every registered
 * [Watched] periodically with the current time. It never issues communication itself, so it keeps
 * running while the threads that issue native calls are blocked inside a library. Its one client
 * is each communicator's front (`CommunicatorFront`): the front times every operation from its call
 * and, for one still in flight past the deadline, asks the backend to abort it from here (record the
 * failure, fail the waiting callers, call the library's abort, as PyTorch's `ProcessGroupNCCL`
 * watchdog calls `ncclCommAbort` from its own thread).
 *
 * The calling threads read no clock for this: the front's scan stamps each call it has not seen
 * before with the scan's own time, never before the call, so a late scan delays a deadline but
 * never brings it forward. [coarseNanos], the time of the latest scan, is a clock a recording path
 * may read for free (at most about one period behind [System.nanoTime] while this thread runs on
 * time; the MPI backend's flight recorder uses it).
 *
 * Thread-safe. A [Watched] that throws is reported to stderr once per registration and keeps being
 * called; its [Watched.checkDeadlines] must be quick and must not block.
 */
@InternalTpcommApi
public object DeadlineWatchdog {
    /** Something with deadlines: a communicator's front. */
    public fun interface Watched {
        /** Called on the watchdog thread about every period with [nowNanos] (`System.nanoTime`). */
        public fun checkDeadlines(nowNanos: Long)
    }

    /** A registration; [close] stops the calls (idempotent). */
    public class Registration internal constructor(
        internal val strong: Watched?,
        internal val weak: WeakReference<Watched>?,
        internal val periodNanos: Long,
    ) : AutoCloseable {
        @Volatile internal var nextDue: Long = System.nanoTime() + periodNanos
        @Volatile internal var reported: Boolean = false

        internal fun target(): Watched? = strong ?: weak?.get()

        /** Stops calling the watched object; a call already in progress on the watchdog thread may still finish. */
        override fun close() {
            registrations.remove(this)
        }
    }

    private val registrations = ConcurrentHashMap.newKeySet<Registration>()
    @Volatile private var thread: Thread? = null

    @Volatile private var coarse: Long = System.nanoTime()

    /**
     * The longest time [coarseNanos] went without advancing since the thread's first scan, in
     * nanoseconds: [MAX_PERIOD_MILLIS] while the thread runs on time, more when the machine starved
     * it (three loaded JVMs on two cores: a healthy MPI job's dumps showed 76 ms between ranks).
     * Written by the watchdog's thread only.
     */
    @Volatile private var longestStepNanos: Long = 0L

    /**
     * `System.nanoTime()` as of the watchdog's latest scan: at most about one period old (at most
     * [MAX_PERIOD_MILLIS]) while the machine lets the watchdog's thread run. Reading it starts
     * that thread when nothing registered yet, so the clock always advances.
     */
    public val coarseNanos: Long
        get() {
            if (thread == null) ensureThread()
            return coarse
        }

    /** The longest the watchdog sleeps between scans, in milliseconds: how stale [coarseNanos] may be while its thread runs on time. */
    public const val MAX_PERIOD_MILLIS: Long = 50L

    /**
     * A flight-recorder clock that reads no clock: [coarseNanos], at most [MAX_PERIOD_MILLIS] behind
     * [System.nanoTime] while the watchdog's thread runs on time. Its `resolutionMicros` is that
     * period, or the longest the clock was observed not to advance when the machine starved the
     * thread longer, so that a dump never claims its start times finer than they were.
     */
    public val coarseClock: FlightRecorder.NanoClock = object : FlightRecorder.NanoClock {
        override fun nanoTime(): Long = coarseNanos
        override val resolutionMicros: Long get() = maxOf(MAX_PERIOD_MILLIS * 1_000L, longestStepNanos / 1_000L)
    }

    /**
     * Calls [watched] every [periodMillis] ms (at least 1) from now on. With [weak], the watchdog
     * holds [watched] weakly and drops it once it is unreachable (a world the user forgot to close
     * does not leak); then keep [watched] reachable yourself, typically by making the communicator
     * implement it.
     */
    public fun register(watched: Watched, periodMillis: Long, weak: Boolean = false): Registration {
        val period = periodMillis.coerceAtLeast(1) * 1_000_000
        val r = if (weak) Registration(null, WeakReference(watched), period) else Registration(watched, null, period)
        registrations += r
        ensureThread()
        LockSupport.unpark(thread)
        return r
    }

    /** The period for a communicator whose calls time out after [timeoutMillis]: a tenth of it, between 2 and 50 ms. */
    public fun periodFor(timeoutMillis: Long): Long = (timeoutMillis / 10).coerceIn(2, MAX_PERIOD_MILLIS)

    private fun ensureThread() {
        if (thread != null) return
        synchronized(this) {
            if (thread == null) thread = Thread.ofPlatform().daemon(true).name("tpcomm-watchdog").start(::loop)
        }
    }

    private fun loop() {
        var previous = 0L
        while (true) {
            val now = System.nanoTime()
            coarse = now
            if (previous != 0L && now - previous > longestStepNanos) longestStepNanos = now - previous
            previous = now
            var nextWake = now + MAX_PERIOD_MILLIS * 1_000_000L
            for (r in registrations) {
                val w = r.target()
                if (w == null) { registrations.remove(r); continue }
                if (now - r.nextDue >= 0) {
                    r.nextDue = now + r.periodNanos
                    try {
                        w.checkDeadlines(now)
                    } catch (t: Throwable) {
                        if (!r.reported) {
                            r.reported = true
                            System.err.println("tpcomm: a deadline check failed (reported once): $t")
                            t.printStackTrace()
                        }
                    }
                }
                if (r.nextDue - nextWake < 0) nextWake = r.nextDue
            }
            val sleep = nextWake - System.nanoTime()
            if (sleep > 0) LockSupport.parkNanos(this, sleep)
        }
    }
}
