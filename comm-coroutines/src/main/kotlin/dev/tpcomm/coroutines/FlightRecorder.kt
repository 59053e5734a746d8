package dev.tpcomm.coroutines

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.DType
import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.ReduceOp
import dev.tpcomm.engine.CommunicatorFront
import kotlinx.serialization.SerialName
import kotlinx.serialization.Serializable
import kotlinx.serialization.json.Json
import java.lang.invoke.MethodHandles
import java.lang.invoke.VarHandle
import java.nio.file.Path
import java.util.concurrent.CancellationException
import java.util.concurrent.atomic.AtomicLong
import java.util.concurrent.atomic.AtomicReference
import java.util.concurrent.atomic.AtomicReferenceArray

/**
 * Remembers the last [capacity] operations of one communicator, for the diagnostic dumped when a
 * call times out or the communicator aborts (as NCCL's and PyTorch's flight recorders do), and
 * reports every operation to JDK Flight Recorder (events `dev.tpcomm.Collective`,
 * `dev.tpcomm.PointToPoint`, `dev.tpcomm.Split`, `dev.tpcomm.Abort`) and to JMX (an MBean
 * `dev.tpcomm:type=Communicator,...` per recorder; `-Dtpcomm.jmx=false` turns it off).
 *
 * Every backend records the same typed fields ([start]); dumps use one versioned schema
 * ([FlightRecorderDump]). Each [start] assigns the next sequence number (starting at 1) and returns
 * an [Entry] that the backend marks [Entry.complete] or [Entry.fail]. With capacity 0 nothing is
 * kept but sequence numbers still count.
 *
 * **Dumps to files.** With a [dumpDirectory], the recorder writes `<dir>/<communicator>-rank<R>.json`
 * when an operation fails with a [CommunicationException] (timeout, mismatch, abort), on
 * [recordAbort], on [close] after a failure, at JVM shutdown while it is open, and on [dumpToFile].
 *
 * **Cost.** Recording is on every operation's path, so it takes no lock: one atomic increment,
 * one read of [clock], one small allocation and one compare-and-set into the ring per [start], and
 * one clock read per [Entry.complete] when [timing] is on (none when it is off; [Entry.fail]
 * always reads one). With no JFR recording running, the events cost one check per operation;
 * `-Dtpcomm.jfr=false` removes even that (the JIT folds the constant).
 *
 * **Thread-safety.** Any thread may start, complete, fail and dump concurrently. Sequence numbers
 * are unique and increase in call order of [start]; collective sequence numbers are assigned in
 * the same call (collectives of one communicator are issued in one order, as every backend
 * requires). A dump shows every kept entry whole, each as it was at some moment during the dump.
 * When more than [capacity] operations start at once from several threads, the ring keeps the
 * newest [capacity] of them (an older entry never overwrites a newer one).
 */
public class FlightRecorder(
    /** How many recent operations are kept. */
    public val capacity: Int,
    /** Rank written into the dump. */
    public val rank: Int = 0,
    /** Backend name written into the dump. */
    public val backend: String = "",
    /**
     * Whether completion times of successful operations are recorded. When false, [Entry.complete]
     * reads no clock and a completed entry's [FlightRecord.durationMicros] is null; a failed
     * operation always records when it failed ([Entry.fail] reads the clock: failures are rare and
     * their time is what a diagnosis needs), and an operation still in progress always reports how
     * long it has been running.
     */
    public val timing: Boolean = true,
    /**
     * Where [start] reads an operation's start time: [System.nanoTime] by default. A backend may
     * pass a cheaper, coarser clock in the same time base (`System.nanoTime` values that another
     * thread advances); start times and running durations are then accurate to its
     * [NanoClock.resolutionMicros], which dumps state.
     */
    public val clock: NanoClock = NanoClock.SYSTEM,
    /** The communicator's number of ranks, written into the dump. */
    public val worldSize: Int = 1,
    /** The communicator's id, the same on every rank (`world`, or derived for a split); names the dump file. */
    public val communicator: String = "world",
    /**
     * Where dumps are written on failure, close after failure and shutdown. Null (the default) takes
     * the environment variable `TPCOMM_FLIGHT_RECORDER_DIR`, so that it applies however the
     * communicator was created (`CommConfig()`, `runLocalWorld`, `Comm.create`, not only
     * `CommConfig.fromEnvironment()`); null and no variable (or a blank one): nowhere.
     */
    dumpDirectory: String? = null,
) : AutoCloseable {
    /** Where dumps are written: the constructor's directory, else `TPCOMM_FLIGHT_RECORDER_DIR`, else null (nowhere). */
    public val dumpDirectory: String? = dumpDirectory ?: ENVIRONMENT_DUMP_DIRECTORY

    /** A source of `System.nanoTime`-based time stamps for [start]. Must be thread-safe and cheap. */
    public fun interface NanoClock {
        /** The current time, in the time base of [System.nanoTime]. */
        public fun nanoTime(): Long

        /**
         * How far [nanoTime] may lag `System.nanoTime`, in microseconds (0, the default, for an exact
         * clock); dumps state it ([FlightRecorderDump.clockResolutionMicros]) so that readers of several
         * ranks' dumps know which arrival gaps are real. Must not be negative.
         */
        public val resolutionMicros: Long get() = 0L

        public companion object {
            /** [System.nanoTime] itself. */
            public val SYSTEM: NanoClock = NanoClock { System.nanoTime() }
        }
    }

    init {
        require(capacity >= 0) { "flight recorder capacity must be >= 0, got $capacity" }
        require(worldSize >= 1) { "flight recorder worldSize must be >= 1, got $worldSize" }
        require(clock.resolutionMicros >= 0) { "flight recorder clock's resolutionMicros must be >= 0, got ${clock.resolutionMicros}" }
    }

    private val ring = AtomicReferenceArray<Entry>(capacity)
    private val sequences = AtomicLong(1L)
    private var collectives = 0L
    private val firstFailure = AtomicReference<String?>(null)
    @Volatile private var closed = false
    private val dumpLock = Any()

    /** The instance number of this recorder in the JVM (JMX names and logs). */
    public val instance: Long = INSTANCES.incrementAndGet()

    /** State of a recorded operation. */
    @Serializable
    public enum class State {
        /** Accepted but not started yet (waiting in a queue). */
        Queued,

        /** Inside the call: waiting for peers or moving data. */
        Started,

        /** Finished successfully. */
        Completed,

        /** Finished with an error ([FlightRecord.outcome] says which). */
        Failed,
    }

    /** How a finished operation ended. */
    @Serializable
    public enum class Outcome {
        /** Completed. */
        @SerialName("ok") Ok,

        /** A [CommunicationTimeoutException]. */
        @SerialName("timeout") Timeout,

        /** A [CollectiveMismatchException]. */
        @SerialName("mismatch") Mismatch,

        /** A [CommunicatorAbortedException] or another [CommunicationException]. */
        @SerialName("aborted") Aborted,

        /** The caller's coroutine was cancelled. */
        @SerialName("cancelled") Cancelled,

        /** Any other exception. */
        @SerialName("error") Error,
    }

    /** One recorded operation. Mutated only through [complete], [fail] and [begin]; read through [snapshot]. */
    public inner class Entry internal constructor(
        /** Sequence number: 1 for the communicator's first operation. */
        public val sequence: Long,
        /** Collective sequence number (1 for the first collective), 0 for a point-to-point call. */
        public val collectiveSequence: Long,
        /** The operation's name. */
        public val operation: String,
        private val dtype: DType?,
        private val shape: List<Int>?,
        private val bytes: Long,
        private val root: Int,
        private val peer: Int,
        private val tag: Int,
        private val dim: Int,
        private val reduceOp: ReduceOp?,
        private val queuedNanos: Long,
        queued: Boolean,
        @JvmField internal val event: FlightEvents.OperationEvent?,
        /**
         * The composite operation this entry is one step of (an object collective's length exchange,
         * say), or null. A step is not kept in the ring and has its parent's sequence numbers and
         * name: [begin] begins the parent too, [fail] fails it, and [complete] finishes only the step
         * (the parent completes when the whole operation does).
         */
        @JvmField internal val parent: Entry? = null,
    ) {
        // The state is published with a release store after endNanos and error and read with an
        // acquire load before them: ordered without a full fence on the recording thread. The field
        // starts at its default (Started), so constructing an entry of a started call stores nothing.
        @Suppress("unused") private var state: Int = STARTED
        private var startNanos: Long = queuedNanos
        private var endNanos: Long = 0
        private var error: String? = null

        /** Whether the front handed the tensors it retained for this operation to the backend ([CommunicatorFront.handOverTensors]). */
        @Volatile @JvmField internal var tensorsHandedOver: Boolean = false

        /** The timeout that ended this operation at its deadline (the front's [CommunicatorFront.expire]), or null. */
        @Volatile @JvmField internal var timedOut: dev.tpcomm.CommunicationTimeoutException? = null

        /**
         * The timeout that ended this operation at its deadline, or null: the backend ends the
         * operation with it, named, whatever failed the communicator first. Thread-safe.
         */
        @InternalTpcommApi
        public val timeout: dev.tpcomm.CommunicationTimeoutException? get() = timedOut

        /** The front's composite operation this entry is a collective step of, and the step's index (from 1); null/0 otherwise. */
        @JvmField internal var composite: Any? = null
        @JvmField internal var stepIndex: Int = 0

        /** Runs once when this entry finishes, whoever finishes it (the front: an issue turn held until then). */
        @Volatile @JvmField internal var onFinish: Runnable? = null

        init {
            if (queued) state = QUEUED
        }

        private fun finish(code: Int): Boolean {
            if (STATE.getAcquire(this) as Int > QUEUED) return false
            if (timing || code != COMPLETED) endNanos = System.nanoTime()
            STATE.setRelease(this, code)
            event?.let { FlightEvents.commit(it, this@FlightRecorder, this, OUTCOMES[code - COMPLETED], error) }
            onFinish?.let { hook -> onFinish = null; hook.run() }
            return true
        }

        /** Marks a queued operation started, reading the clock (a started one is left as it is). Never throws. */
        public fun begin() {
            parent?.begin()
            if (STATE.getAcquire(this) as Int != QUEUED) return
            startNanos = clock.nanoTime()
            STATE.setRelease(this, STARTED)
        }

        /** Marks the operation completed (first call wins). Never throws. */
        public fun complete() {
            finish(COMPLETED)
        }

        /**
         * Marks the operation failed with [cause] (first call wins); the outcome follows the type of
         * [cause]. A [CommunicationException] also writes the dump file when the recorder has a
         * [dumpDirectory]. Never throws.
         */
        public fun fail(cause: Throwable) {
            if (STATE.getAcquire(this) as Int > QUEUED) return
            error = cause.toString()
            val code = outcomeCode(cause)
            val p = parent
            if (p != null) {
                finish(code)
                p.fail(cause)
                return
            }
            if (finish(code)) failed(cause, OUTCOMES[code - COMPLETED])
        }

        /** An immutable copy of this entry. */
        public fun snapshot(): FlightRecord = snapshot(System.nanoTime(), epochMicros())

        /** Whether the operation has not finished yet. */
        public val inFlight: Boolean get() = STATE.getAcquire(this) as Int <= QUEUED

        internal fun startedNanos(): Long = startNanos
        internal fun shapeOrNull(): List<Int>? = shape
        internal fun dtypeOrNull(): DType? = dtype
        internal fun bytes(): Long = bytes
        internal fun root(): Int = root
        internal fun peer(): Int = peer
        internal fun tag(): Int = tag
        internal fun reduceOpOrNull(): ReduceOp? = reduceOp
        internal fun dimOrNone(): Int = dim

        /** The copy as of [now] (`System.nanoTime`) and [nowMicros] (wall clock), read once per dump. */
        internal fun snapshot(now: Long, nowMicros: Long): FlightRecord {
            val code = STATE.getAcquire(this) as Int // read first: it publishes the other fields
            val s = when (code) {
                QUEUED -> State.Queued
                STARTED -> State.Started
                COMPLETED -> State.Completed
                else -> State.Failed
            }
            val started = startNanos
            val finished = code > QUEUED
            fun epoch(nanos: Long) = nowMicros - Math.floorDiv(now - nanos, 1_000L)
            val timed = timing || (finished && code != COMPLETED)
            val duration = when {
                code == QUEUED -> null
                !finished -> (now - started) / 1000
                timed -> (endNanos - started) / 1000
                else -> null
            }
            return FlightRecord(
                sequence = sequence,
                collectiveSequence = collectiveSequence.takeIf { it > 0 },
                operation = operation,
                dtype = dtype?.name,
                shape = shape,
                bytes = bytes,
                root = root.takeIf { it != NONE },
                peer = peer.takeIf { it != NONE },
                tag = tag.takeIf { it != NONE },
                dim = dim.takeIf { it != NONE },
                reduceOp = reduceOp?.name,
                state = s,
                outcome = if (finished) OUTCOMES[code - COMPLETED] else null,
                // Wall-clock times, derived at dump time so that recording reads no wall clock.
                queuedEpochMicros = epoch(queuedNanos),
                startedEpochMicros = epoch(if (code == QUEUED) queuedNanos else started),
                completedEpochMicros = if (finished && timed) epoch(endNanos) else null,
                durationMicros = duration,
                error = if (s == State.Failed) error else null,
            )
        }
    }

    /**
     * Records a new operation and returns its entry. Never blocks; never throws.
     *
     * @param operation name such as `allReduce`.
     * @param dtype the tensor's element type, null without a tensor.
     * @param shape the tensor's shape, null without a tensor.
     * @param bytes the tensor's size in bytes.
     * @param root the root of a rooted collective, or [NONE].
     * @param peer the peer of a point-to-point call (-1 for any source), or [NONE] for a collective:
     * an entry with a peer takes no collective sequence number.
     * @param tag the tag of a point-to-point call, or [NONE].
     * @param reduceOp the reduction, null when none.
     * @param dim the normalised dimension, or [NONE].
     * @param queued true when the call waits in a queue before it starts ([Entry.begin] marks the start).
     */
    public fun start(
        operation: String,
        dtype: DType? = null,
        shape: List<Int>? = null,
        bytes: Long = 0,
        root: Int = NONE,
        peer: Int = NONE,
        tag: Int = NONE,
        reduceOp: ReduceOp? = null,
        dim: Int = NONE,
        queued: Boolean = false,
    ): Entry {
        val collective = if (peer == NONE) ++collectives else 0L
        val event = if (JFR && jdk.jfr.FlightRecorder.isInitialized()) FlightEvents.begin(operation, peer) else null
        val e = Entry(
            sequences.getAndIncrement(), collective, operation, dtype, shape, bytes, root, peer, tag, dim, reduceOp,
            clock.nanoTime(), queued, event,
        )
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

    /**
     * A step of the composite operation recorded as [parent] (see [Entry.parent]): an entry with
     * [parent]'s numbers, name and arguments that the ring does not keep, so that the flight record
     * shows the operation the user called, once. Never blocks; never throws.
     */
    public fun step(parent: Entry, queued: Boolean = false): Entry = Entry(
        parent.sequence, parent.collectiveSequence, parent.operation, parent.dtypeOrNull(), parent.shapeOrNull(), parent.bytes(),
        parent.root(), parent.peer(), parent.tag(), parent.dimOrNone(), parent.reduceOpOrNull(), clock.nanoTime(), queued, null, parent,
    )

    /** The sequence number the next [start] will assign. */
    public val nextSequenceNumber: Long get() = sequences.get()

    /** Whether this recorder saw a failure ([Entry.fail] with a communication error) or an abort. */
    public val sawFailure: Boolean get() = firstFailure.get() != null

    /** The first failure or abort cause seen, as text; null when none. */
    public val failureCause: String? get() = firstFailure.get()

    /** The kept entries, oldest first. */
    public fun snapshot(): List<FlightRecord> = snapshotEntries().let { (entries, now, nowMicros) -> entries.map { it.snapshot(now, nowMicros) } }

    internal fun liveEntries(): List<Entry> = (0 until capacity).mapNotNull { ring.get(it) }.sortedBy { it.sequence }

    private fun snapshotEntries(): Triple<List<Entry>, Long, Long> {
        val entries = liveEntries()
        return Triple(entries, System.nanoTime(), epochMicros())
    }

    /** The dump document as of now, with [reason]. */
    internal fun dump(reason: DumpReason): FlightRecorderDump {
        val records = snapshot()
        return FlightRecorderDump(
            backend = backend,
            communicator = communicator,
            rank = rank,
            worldSize = worldSize,
            reason = reason.text,
            pid = ProcessHandle.current().pid(),
            dumpedAtEpochMicros = epochMicros(),
            lastSequenceIssued = nextSequenceNumber - 1,
            lastSequenceCompleted = records.lastOrNull { it.state == State.Completed }?.sequence ?: 0L,
            aborted = sawFailure,
            abortCause = failureCause,
            entries = records,
            clockResolutionMicros = clock.resolutionMicros,
        )
    }

    /** The kept entries as JSON in the [FlightRecorderDump] schema (reason `exception`). */
    public fun dumpJson(): String = JSON.encodeToString(FlightRecorderDump.serializer(), dump(DumpReason.Exception))

    /** The file this recorder dumps into under [directory]: `<communicator>-rank<R>.json`. */
    public fun dumpFile(directory: Path): Path = directory.resolve("${safeId(communicator)}-rank$rank.json")

    /**
     * Writes the dump now into [directory] (default [dumpDirectory]) and returns the file.
     *
     * @throws IllegalStateException when neither is set.
     * @throws java.io.IOException when the file cannot be written.
     */
    public fun dumpToFile(directory: Path? = null): Path {
        val dir = directory ?: dumpDirectory?.let { Path.of(it) }
            ?: throw IllegalStateException("no flight-recorder directory: set CommConfig.flightRecorderDir or TPCOMM_FLIGHT_RECORDER_DIR, or pass one")
        return write(dir, DumpReason.OnDemand)
    }

    private fun write(dir: Path, reason: DumpReason): Path = synchronized(dumpLock) {
        val text = JSON.encodeToString(FlightRecorderDump.serializer(), dump(reason))
        java.nio.file.Files.createDirectories(dir)
        val target = dumpFile(dir)
        val tmp = dir.resolve("${target.fileName}.${ProcessHandle.current().pid()}.tmp")
        java.nio.file.Files.writeString(tmp, text)
        java.nio.file.Files.move(tmp, target, java.nio.file.StandardCopyOption.REPLACE_EXISTING, java.nio.file.StandardCopyOption.ATOMIC_MOVE)
        target
    }

    /** Writes into [dumpDirectory] if set; reports and swallows I/O errors (diagnostics must not fail a job). */
    internal fun writeQuietly(reason: DumpReason) {
        val dir = dumpDirectory ?: return
        try {
            write(Path.of(dir), reason)
        } catch (e: Exception) {
            System.err.println("tpcomm: could not write the flight recorder dump of $communicator rank $rank into $dir: $e")
        }
    }

    private fun failed(cause: Throwable, outcome: Outcome) {
        if (cause !is CommunicationException) return
        firstFailure.compareAndSet(null, cause.toString())
        writeQuietly(
            when (outcome) {
                Outcome.Timeout -> DumpReason.Timeout
                Outcome.Mismatch -> DumpReason.Mismatch
                else -> DumpReason.Aborted
            },
        )
    }

    /**
     * Records that the communicator aborted with [cause]: a `dev.tpcomm.Abort` JFR event, the
     * aborted flag of the dump and MBean, and a dump file when [dumpDirectory] is set. Ignored once
     * [close]d (closing a communicator may abort what is left of it). Never throws.
     */
    public fun recordAbort(cause: Throwable) {
        if (closed) return // closing a world aborts what is left of it: not a failure to report
        val first = firstFailure.compareAndSet(null, cause.toString())
        if (JFR && jdk.jfr.FlightRecorder.isInitialized()) FlightEvents.abort(this, cause)
        if (first) writeQuietly(if (cause is CommunicationTimeoutException) DumpReason.Timeout else DumpReason.Aborted)
    }

    /**
     * Marks the communicator closed: writes a dump file when it saw a failure (and has a
     * [dumpDirectory]) and removes its MBean and shutdown dump. Idempotent; never throws.
     */
    override fun close() {
        if (closed) return
        closed = true
        if (sawFailure) writeQuietly(DumpReason.Close)
        FlightRecorderRegistry.unregister(this)
    }

    /** Whether [close] was called. */
    public val isClosed: Boolean get() = closed

    init {
        FlightRecorderRegistry.register(this)
    }

    override fun toString(): String = "FlightRecorder($backend $communicator rank $rank of $worldSize, #$instance)"

    public companion object {
        /**
         * Writes the shutdown dump of every open recorder now, on this thread. For a backend that must
         * end the process with `Runtime.halt` (which does not wait for the JVM's shutdown hooks, this
         * one's included): call it first, so the dumps are on disk. Never throws.
         */
        @InternalTpcommApi
        @JvmStatic
        public fun writeShutdownDumps(): Unit = FlightRecorderRegistry.writeShutdownDumps()

        /** The value of an absent root, peer, tag or dim in [start]. */
        public const val NONE: Int = Int.MIN_VALUE

        /** `TPCOMM_FLIGHT_RECORDER_DIR`, read once; null when unset or blank. */
        private val ENVIRONMENT_DUMP_DIRECTORY: String? = System.getenv("TPCOMM_FLIGHT_RECORDER_DIR")?.takeIf { it.isNotBlank() }

        /**
         * False with `-Dtpcomm.jfr=false`: no JFR events at all, the check folded away by the JIT.
         * When true, an operation touches the event classes only once the JDK's Flight Recorder is
         * initialised (`jdk.jfr.FlightRecorder.isInitialized()`, a static read: true from the first
         * recording on, `-XX:StartFlightRecording` or `jcmd JFR.start` included), so a JVM that
         * never records does not pay JFR's initialisation (its metadata, settings and event
         * registration: about half a second of a fresh JVM's first call on a 2-core machine).
         */
        @JvmField internal val JFR: Boolean = System.getProperty("tpcomm.jfr", "true") != "false"

        private const val STARTED: Int = 0
        private const val QUEUED: Int = 1
        private const val COMPLETED: Int = 2
        private val OUTCOMES: Array<Outcome> = Outcome.entries.toTypedArray()
        private val INSTANCES = AtomicLong()
        private val STATE: VarHandle = MethodHandles.privateLookupIn(Entry::class.java, MethodHandles.lookup())
            .findVarHandle(Entry::class.java, "state", Int::class.javaPrimitiveType)
        internal val JSON = Json { prettyPrint = false; encodeDefaults = true; ignoreUnknownKeys = true }

        private fun outcomeCode(cause: Throwable): Int = COMPLETED + when (cause) {
            is CommunicationTimeoutException -> Outcome.Timeout.ordinal
            is CollectiveMismatchException -> Outcome.Mismatch.ordinal
            is CommunicationException -> Outcome.Aborted.ordinal
            is CancellationException -> Outcome.Cancelled.ordinal
            else -> Outcome.Error.ordinal
        }

        internal fun epochMicros(): Long {
            val now = java.time.Instant.now()
            return now.epochSecond * 1_000_000L + now.nano / 1_000
        }

        /** [id] with every character outside `[A-Za-z0-9._=-]` replaced by `_`: safe in a file name. */
        public fun safeId(id: String): String = id.map { if (it.isLetterOrDigit() || it in "._=-") it else '_' }.joinToString("")

        /** Parses a dump written by any recorder of this schema version. @throws IllegalArgumentException on another schema or version. */
        public fun parseDump(json: String): FlightRecorderDump {
            val dump = JSON.decodeFromString(FlightRecorderDump.serializer(), json)
            require(dump.schema == FlightRecorderDump.SCHEMA && dump.version == FlightRecorderDump.SCHEMA_VERSION) {
                "not a tpcomm flight-recorder dump of version ${FlightRecorderDump.SCHEMA_VERSION}: schema ${dump.schema}, version ${dump.version}"
            }
            return dump
        }
    }
}
