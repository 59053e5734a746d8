package dev.tpcomm.coroutines

import kotlinx.serialization.Serializable
import kotlinx.serialization.json.Json
import java.lang.invoke.MethodHandles
import java.lang.invoke.VarHandle
import java.util.concurrent.atomic.AtomicLong
import java.util.concurrent.atomic.AtomicReferenceArray

/**
 * Remembers the last [capacity] operations of one communicator, for the diagnostic dumped when a
 * call times out or the communicator aborts (as NCCL's and PyTorch's flight recorders do).
 *
 * Each [start] assigns the next sequence number (starting at 1) and returns an [Entry] that the
 * backend marks [Entry.complete] or [Entry.fail]. With capacity 0 nothing is kept but sequence
 * numbers still count.
 *
 * **Cost.** Recording is on every operation's path, so it takes no lock: one atomic increment,
 * one read of [clock], one small allocation and one compare-and-set into the ring per [start], and
 * one clock read per [Entry.complete] when [timing] is on (none when it is off).
 *
 * **Thread-safety.** Any thread may start, complete, fail and dump concurrently. Sequence numbers
 * are unique and increase in call order of [start]. A dump shows every kept entry whole, each as
 * it was at some moment during the dump; an entry that completes while the dump runs may show
 * either state. When more than [capacity] operations start at once from several threads, the ring
 * keeps the newest [capacity] of them (an older entry never overwrites a newer one).
 */
public class FlightRecorder(
    /** How many recent operations are kept. */
    public val capacity: Int,
    /** Rank written into the dump. */
    public val rank: Int = 0,
    /** Backend name written into the dump. */
    public val backend: String = "",
    /**
     * Whether completion times are recorded. When false, [Entry.complete] and [Entry.fail] read no
     * clock and a finished entry's [FlightRecord.durationMicros] is null; an operation still in
     * progress always reports how long it has been running (the figure a hang diagnosis needs).
     */
    public val timing: Boolean = true,
    /**
     * Where [start] reads an operation's start time: [System.nanoTime] by default. A backend may
     * pass a cheaper, coarser clock in the same time base (`System.nanoTime` values that another
     * thread advances); start times and running durations are then accurate to its resolution.
     */
    public val clock: NanoClock = NanoClock.SYSTEM,
) {
    /** A source of `System.nanoTime`-based time stamps for [start]. Must be thread-safe and cheap. */
    public fun interface NanoClock {
        /** The current time, in the time base of [System.nanoTime]. */
        public fun nanoTime(): Long

        public companion object {
            /** [System.nanoTime] itself. */
            public val SYSTEM: NanoClock = NanoClock { System.nanoTime() }
        }
    }

    init {
        require(capacity >= 0) { "flight recorder capacity must be >= 0, got $capacity" }
    }

    private val ring = AtomicReferenceArray<Entry>(capacity)
    private val sequences = AtomicLong(1L)

    /** State of a recorded operation. */
    @Serializable
    public enum class State { Issued, Completed, Failed }

    /** One recorded operation. Mutated only through [complete] and [fail]; read through [snapshot]. */
    public inner class Entry internal constructor(
        /** Sequence number: 1 for the communicator's first operation. */
        public val sequence: Long,
        private val operation: String,
        private val dtype: String?,
        private val shape: List<Int>?,
        private val bytes: Long,
        private val peers: String?,
        private val detail: String?,
        private val startNanos: Long,
    ) {
        // The state is published with a release store after endNanos and error and read with an
        // acquire load before them: ordered without a full fence on the recording thread. The field
        // starts at its default (Issued), so constructing an entry stores nothing to it.
        @Suppress("unused") private var state: Int = ISSUED
        private var endNanos: Long = 0
        private var error: String? = null

        private fun finish(code: Int): Boolean {
            if (STATE.getAcquire(this) as Int != ISSUED) return false
            if (timing) endNanos = System.nanoTime()
            STATE.setRelease(this, code)
            return true
        }

        /** Marks the operation completed (first call wins). Never throws. */
        public fun complete() {
            finish(COMPLETED)
        }

        /** Marks the operation failed with [cause] (first call wins). Never throws. */
        public fun fail(cause: Throwable) {
            if (STATE.getAcquire(this) as Int != ISSUED) return
            error = cause.toString()
            finish(FAILED)
        }

        /** An immutable copy of this entry. */
        public fun snapshot(): FlightRecord = snapshot(System.nanoTime(), System.currentTimeMillis())

        /** The copy as of [now] (`System.nanoTime`) and [nowMillis] (wall clock), read once per dump. */
        internal fun snapshot(now: Long, nowMillis: Long): FlightRecord {
            val s = STATES[STATE.getAcquire(this) as Int] // read first: it publishes endNanos and error
            val duration = when {
                s == State.Issued -> (now - startNanos) / 1000
                timing -> (endNanos - startNanos) / 1000
                else -> null
            }
            return FlightRecord(
                sequence = sequence,
                operation = operation,
                dtype = dtype,
                shape = shape,
                bytes = bytes,
                peers = peers,
                detail = detail,
                state = s,
                // The wall-clock start, derived at dump time so that recording reads no wall clock.
                startEpochMillis = nowMillis - Math.floorDiv(now - startNanos, 1_000_000L),
                durationMicros = duration,
                error = if (s == State.Failed) error else null,
            )
        }
    }

    /**
     * Records a new operation and returns its entry. Never blocks; never throws.
     *
     * @param operation name such as `allReduce`.
     * @param peers root, peer, or member description (free text such as `root=2`).
     * @param detail extra fields such as the reduce op.
     */
    public fun start(
        operation: String,
        dtype: String? = null,
        shape: List<Int>? = null,
        bytes: Long = 0,
        peers: String? = null,
        detail: String? = null,
    ): Entry {
        val e = Entry(sequences.getAndIncrement(), operation, dtype, shape, bytes, peers, detail, clock.nanoTime())
        if (capacity > 0) {
            val slot = ((e.sequence - 1) % capacity).toInt()
            var old = ring.getPlain(slot)
            while (old == null || old.sequence < e.sequence) {
                val witness = ring.compareAndExchange(slot, old, e)
                if (witness === old) break
                old = witness
            }
        }
        return e
    }

    /** The sequence number the next [start] will assign. */
    public val nextSequenceNumber: Long get() = sequences.get()

    /** The kept entries, oldest first. */
    public fun snapshot(): List<FlightRecord> {
        val entries = (0 until capacity).mapNotNull { ring.get(it) }.sortedBy { it.sequence }
        val now = System.nanoTime()
        val nowMillis = System.currentTimeMillis()
        return entries.map { it.snapshot(now, nowMillis) }
    }

    /** The kept entries as JSON: `{"rank":..,"backend":..,"entries":[...]}`. */
    public fun dumpJson(): String = JSON.encodeToString(FlightRecorderDump.serializer(), FlightRecorderDump(rank, backend, snapshot()))

    private companion object {
        const val ISSUED: Int = 0
        const val COMPLETED: Int = 1
        const val FAILED: Int = 2
        val STATES: Array<State> = arrayOf(State.Issued, State.Completed, State.Failed)
        val STATE: VarHandle = MethodHandles.privateLookupIn(Entry::class.java, MethodHandles.lookup())
            .findVarHandle(Entry::class.java, "state", Int::class.javaPrimitiveType)
        val JSON = Json { prettyPrint = false; encodeDefaults = true }
    }
}

/**
 * One operation as the [FlightRecorder] saw it. `durationMicros` runs until now while the state is
 * Issued; for a finished operation it is null when the recorder does not record completion times
 * ([FlightRecorder.timing]).
 *
 * @property sequence the operation's number in its communicator's program order, from 1.
 * @property operation the operation's name (`allReduce`, `send`, ...).
 * @property dtype the element type's name, or null when the operation carries no tensor.
 * @property shape the tensor's shape, or null when the operation carries no tensor.
 * @property bytes the bytes this rank contributes.
 * @property peers root, peer or member description (free text such as `root=2`), or null.
 * @property detail extra fields such as the reduce op, or null.
 * @property state Issued, Completed or Failed when the dump was taken.
 * @property startEpochMillis when the operation was issued (wall clock, milliseconds since the epoch).
 * @property durationMicros how long it ran (until the dump while Issued), or null when not recorded.
 * @property error the failure's message when [state] is Failed, else null.
 */
@Serializable
public data class FlightRecord(
    public val sequence: Long,
    public val operation: String,
    public val dtype: String?,
    public val shape: List<Int>?,
    public val bytes: Long,
    public val peers: String?,
    public val detail: String?,
    public val state: FlightRecorder.State,
    public val startEpochMillis: Long,
    public val durationMicros: Long?,
    public val error: String?,
)

/**
 * The JSON document [FlightRecorder.dumpJson] writes.
 *
 * @property rank the rank whose recorder this is.
 * @property backend the backend's name.
 * @property entries the recorded operations, oldest first.
 */
@Serializable
public data class FlightRecorderDump(
    public val rank: Int,
    public val backend: String,
    public val entries: List<FlightRecord>,
)
