package dev.tpcomm.engine

import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.engine.DeadlineWatchdog
import kotlin.time.Duration

/**
 * The deadlines of one communicator's operations, from the moment of each call to its end: the
 * front [track]s every operation it records, and the core's [DeadlineWatchdog] thread ([scan])
 * hands each one still in flight past its timeout to the backend, once: the communicator's
 * operation timeout, or its creation timeout (`CommConfig.creationTimeout`) for the operations that
 * make a communicator (split, group, duplicate).
 *
 * An operation is "in flight" while its flight record is ([FlightRecorder.Entry.inFlight]): the
 * front completes or fails every record it starts, so an operation leaves this set by finishing,
 * whichever path finished it. The calling thread reads no clock: an operation tracked since the last
 * scan is stamped by the first scan that sees it, with that scan's time, which is never before the
 * call; it is reported once `now - stamp` exceeds the timeout. So an operation is reported never
 * before its timeout, however late the watchdog's thread runs, and about two periods after it at
 * most while that thread keeps its period (the period is a tenth of the timeout, 2 to 50 ms). An
 * earlier version stamped with the watchdog's previous scan time ([DeadlineWatchdog.coarseNanos])
 * and added one period, which fired early whenever a scan came more than a period late.
 *
 * Not thread-safe by itself: the front calls [track] and [scan]'s collection under its issue lock.
 * Finished operations are dropped from the front of the queue when the next one is tracked (they
 * mostly finish in call order) and from anywhere at each scan, so the queue holds about what is in
 * flight.
 */
internal class CallDeadlines(timeout: Duration, creationTimeout: Duration = timeout) {
    private fun limited(d: Duration) = d.isFinite() && d.isPositive()

    /** False when neither timeout is finite and positive: nothing is tracked. */
    val enabled: Boolean = limited(timeout) || limited(creationTimeout)

    private val limitNanos: Long = if (limited(timeout)) timeout.inWholeNanoseconds else Long.MAX_VALUE

    /** The limit of the operations that make a communicator ([track] with `creation`): `CommConfig.creationTimeout`. */
    private val creationLimitNanos: Long = if (limited(creationTimeout)) creationTimeout.inWholeNanoseconds else Long.MAX_VALUE

    /** The watchdog period for the shorter timeout, in milliseconds. */
    val periodMillis: Long = if (enabled) DeadlineWatchdog.periodFor(minOf(limitNanos, creationLimitNanos) / 1_000_000L) else 0L

    private var entries = arrayOfNulls<FlightRecorder.Entry>(INITIAL)
    private var calls = arrayOfNulls<Any>(INITIAL)
    private var starts = LongArray(INITIAL)
    private var limits = LongArray(INITIAL)
    private var head = 0
    private var size = 0

    /**
     * Starts timing [entry] (with the backend's [call], or null) from now, against the creation
     * timeout when [creation] (split, group, duplicate), else the operation timeout. Under the owner's lock.
     */
    fun track(entry: FlightRecorder.Entry, call: Any?, creation: Boolean = false) {
        val limit = if (creation) creationLimitNanos else limitNanos
        if (limit == Long.MAX_VALUE) return
        while (size > 0 && !entries[head]!!.inFlight) {
            entries[head] = null; calls[head] = null
            head = (head + 1) and (entries.size - 1)
            size--
        }
        if (size == entries.size) compact(Long.MIN_VALUE, null)
        if (size == entries.size) grow()
        val at = (head + size) and (entries.size - 1)
        entries[at] = entry
        calls[at] = call
        starts[at] = UNSTAMPED
        limits[at] = limit
        size++
    }

    /**
     * Drops every finished operation, stamps each one tracked since the last scan with [now], and
     * moves each one stamped longer than the timeout before [now] out into [expired] (entry, then
     * call), so that it is reported once. Under the owner's lock, with [now] read under it, so that
     * [now] is never before the call of an operation tracked so far.
     */
    fun collect(now: Long, expired: MutableList<Any?>) {
        compact(now, expired)
    }

    private fun compact(now: Long, expired: MutableList<Any?>?) {
        val mask = entries.size - 1
        var kept = 0
        for (i in 0 until size) {
            val from = (head + i) and mask
            val e = entries[from]!!
            val c = calls[from]
            var s = starts[from]
            val l = limits[from]
            entries[from] = null; calls[from] = null
            if (!e.inFlight) continue
            if (expired != null) { // a scan: stamp what is new, move out what is past its timeout
                if (s == UNSTAMPED) s = now
                if (now - s > l) {
                    expired += e; expired += c
                    continue
                }
            }
            val to = (head + kept) and mask
            entries[to] = e; calls[to] = c; starts[to] = s; limits[to] = l
            kept++
        }
        size = kept
    }

    private fun grow() {
        val n = entries.size * 2
        val e = arrayOfNulls<FlightRecorder.Entry>(n)
        val c = arrayOfNulls<Any>(n)
        val s = LongArray(n)
        val l = LongArray(n)
        val mask = entries.size - 1
        for (i in 0 until size) {
            val from = (head + i) and mask
            e[i] = entries[from]; c[i] = calls[from]; s[i] = starts[from]; l[i] = limits[from]
        }
        entries = e; calls = c; starts = s; limits = l
        head = 0
    }

    /** How many operations are tracked now (finished ones not yet dropped included); for tests. */
    val tracked: Int get() = size

    private companion object {
        const val INITIAL = 16 // a power of two: indexes wrap with a mask
        const val UNSTAMPED = Long.MIN_VALUE // tracked since the last scan; the next scan stamps it
    }
}
