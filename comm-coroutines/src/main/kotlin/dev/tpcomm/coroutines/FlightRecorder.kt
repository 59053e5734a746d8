package dev.tpcomm.coroutines

import kotlinx.serialization.Serializable
import kotlinx.serialization.json.Json

/**
 * Remembers the last [capacity] operations of one communicator, for the diagnostic dumped when a
 * call times out or the communicator aborts (as NCCL's and PyTorch's flight recorders do).
 *
 * Each [start] assigns the next sequence number (starting at 1) and returns an [Entry] that the
 * backend marks [Entry.complete] or [Entry.fail]. With capacity 0 nothing is kept but sequence
 * numbers still count. Thread-safe: any thread may start, complete, fail and dump concurrently;
 * a dump is a consistent snapshot of the entries at one moment.
 */
public class FlightRecorder(
    /** How many recent operations are kept. */
    public val capacity: Int,
    /** Rank written into the dump. */
    public val rank: Int = 0,
    /** Backend name written into the dump. */
    public val backend: String = "",
) {
    init {
        require(capacity >= 0) { "flight recorder capacity must be >= 0, got $capacity" }
    }

    private val lock = Any()
    private val ring = arrayOfNulls<Entry>(capacity)
    private var nextSequence = 1L

    // Wall-clock anchor (guarded by lock): an entry's epoch time is derived from its System.nanoTime
    // start, so recording costs one clock read; the anchor is refreshed at most every ANCHOR_NANOS
    // so that wall-clock adjustments show up within that time.
    private var anchorNanos = System.nanoTime()
    private var anchorEpochMillis = System.currentTimeMillis()

    private fun epochMillisAt(nanos: Long): Long {
        if (nanos - anchorNanos > ANCHOR_NANOS) {
            anchorNanos = nanos
            anchorEpochMillis = System.currentTimeMillis()
        }
        return anchorEpochMillis + Math.floorDiv(nanos - anchorNanos, 1_000_000L)
    }

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
        private val startEpochMillis: Long,
    ) {
        // endNanos and error are written before the volatile state and read after it, which
        // publishes them: one fence per completion instead of three.
        @Volatile private var state: State = State.Issued
        private var endNanos: Long = 0
        private var error: String? = null

        /** Marks the operation completed (first call wins). */
        public fun complete() {
            if (state == State.Issued) { endNanos = System.nanoTime(); state = State.Completed }
        }

        /** Marks the operation failed with [cause] (first call wins). */
        public fun fail(cause: Throwable) {
            if (state == State.Issued) { error = cause.toString(); endNanos = System.nanoTime(); state = State.Failed }
        }

        /** An immutable copy of this entry. */
        public fun snapshot(): FlightRecord = FlightRecord(
            sequence = sequence,
            operation = operation,
            dtype = dtype,
            shape = shape,
            bytes = bytes,
            peers = peers,
            detail = detail,
            state = state,
            startEpochMillis = startEpochMillis,
            durationMicros = if (endNanos == 0L) (System.nanoTime() - startNanos) / 1000 else (endNanos - startNanos) / 1000,
            error = error,
        )
    }

    /**
     * Records a new operation and returns its entry.
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
    ): Entry = synchronized(lock) {
        val now = System.nanoTime()
        val e = Entry(nextSequence++, operation, dtype, shape, bytes, peers, detail, now, epochMillisAt(now))
        if (capacity > 0) ring[((e.sequence - 1) % capacity).toInt()] = e
        e
    }

    /** The sequence number the next [start] will assign. */
    public val nextSequenceNumber: Long get() = synchronized(lock) { nextSequence }

    /** The kept entries, oldest first. */
    public fun snapshot(): List<FlightRecord> = synchronized(lock) {
        ring.filterNotNull().sortedBy { it.sequence }
    }.map { it.snapshot() }

    /** The kept entries as JSON: `{"rank":..,"backend":..,"entries":[...]}`. */
    public fun dumpJson(): String = JSON.encodeToString(FlightRecorderDump.serializer(), FlightRecorderDump(rank, backend, snapshot()))

    private companion object {
        const val ANCHOR_NANOS: Long = 1_000_000_000L
        val JSON = Json { prettyPrint = false; encodeDefaults = true }
    }
}

/** One operation as the [FlightRecorder] saw it; `durationMicros` runs until now while the state is Issued. */
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
    public val durationMicros: Long,
    public val error: String?,
)

/** The JSON document [FlightRecorder.dumpJson] writes. */
@Serializable
public data class FlightRecorderDump(
    public val rank: Int,
    public val backend: String,
    public val entries: List<FlightRecord>,
)
