package dev.tpcomm.coroutines

import kotlinx.serialization.Serializable

/**
 * One operation as a [FlightRecorder] saw it, in flight-record schema version
 * [FlightRecorderDump.SCHEMA_VERSION]. Every backend fills the same typed fields; a field that does
 * not apply to the operation is null (a barrier has no dtype, a collective no peer).
 *
 * Times are microseconds since the epoch, derived when the dump is taken from the recorder's
 * `System.nanoTime` stamps, so records of ranks on one host (and of hosts with synchronised clocks)
 * can be compared, to within the recorder's [FlightRecorderDump.clockResolutionMicros]. [durationMicros]
 * runs until the dump while the operation is in flight; for an operation that completed it (and
 * [completedEpochMicros]) is null when the recorder does not record completion times
 * ([FlightRecorder.timing]); a failed operation always has both.
 */
@Serializable
public data class FlightRecord(
    /** The communicator's operation number: 1 for its first operation, collective or point-to-point. */
    public val sequence: Long,
    /**
     * The number of this collective among the communicator's collectives (1 for the first; splits
     * and barriers count), the same on every rank for the same call; null for point-to-point calls.
     */
    public val collectiveSequence: Long?,
    /** The operation's name, such as `allReduce`, `send`, `split`. */
    public val operation: String,
    /** The element type's [dev.tpcomm.DType] name, null when the call carries no tensor. */
    public val dtype: String?,
    /** The tensor's shape, null when the call carries no tensor. */
    public val shape: List<Int>?,
    /** Bytes of the tensor the call sends or reduces (0 without a tensor). */
    public val bytes: Long,
    /** The root rank of a rooted collective (broadcast, reduce, gather, scatter), else null. */
    public val root: Int?,
    /** The peer rank of a point-to-point call (destination of a send, source of a receive; -1 for any source), else null. */
    public val peer: Int?,
    /** The tag of a point-to-point call, else null. */
    public val tag: Int?,
    /** The (normalised) dimension of a collective that splits or joins along one, else null. */
    public val dim: Int?,
    /** The [dev.tpcomm.ReduceOp] name of a reduction, else null. */
    public val reduceOp: String?,
    /** Where the operation stands. */
    public val state: FlightRecorder.State,
    /** How it ended; null while it is queued or started. */
    public val outcome: FlightRecorder.Outcome?,
    /** When the backend accepted the call. */
    public val queuedEpochMicros: Long,
    /** When the operation started (equal to [queuedEpochMicros] on backends that start at once). */
    public val startedEpochMicros: Long,
    /** When it completed or failed; null while in flight, or when it completed without completion timing. */
    public val completedEpochMicros: Long?,
    /** From start to completion or failure, or to the dump while in flight; null when it completed without timing. */
    public val durationMicros: Long?,
    /** The failure, as `Throwable.toString()`, when [state] is Failed. */
    public val error: String?,
)

/**
 * The JSON document a [FlightRecorder] dumps (into exceptions, files and the MBean): one rank's view
 * of one communicator. [schema] and [version] identify the format; a reader refuses versions it
 * does not know.
 */
@Serializable
public data class FlightRecorderDump(
    /** Always [SCHEMA]. */
    public val schema: String = SCHEMA,
    /** The format version: [SCHEMA_VERSION]. */
    public val version: Int = SCHEMA_VERSION,
    /** The backend's name (`local`, `mpi`, `nccl`, `rccl`). */
    public val backend: String,
    /** The communicator's id, the same on every rank of it (`world`, or derived for a split). */
    public val communicator: String,
    /** This rank within the communicator. */
    public val rank: Int,
    /** The communicator's number of ranks. */
    public val worldSize: Int,
    /** Why the dump was taken: `timeout`, `mismatch`, `aborted`, `cancelled`, `failed`, `close`, `shutdown`, `on-demand`, `exception`. */
    public val reason: String,
    /** The process id of the dumping JVM. */
    public val pid: Long,
    /** When the dump was taken, microseconds since the epoch. */
    public val dumpedAtEpochMicros: Long,
    /** The sequence number of the last operation issued (0 before the first). */
    public val lastSequenceIssued: Long,
    /** The highest sequence number among the kept entries that completed (0 when none did). */
    public val lastSequenceCompleted: Long,
    /** Whether this rank saw its communicator abort or fail. */
    public val aborted: Boolean,
    /** The first abort or failure cause this rank saw, as `Throwable.toString()`. */
    public val abortCause: String?,
    /** The kept records, oldest first. */
    public val entries: List<FlightRecord>,
    /**
     * How far this rank's start times may lie before the moment the call reached the recorder, in
     * microseconds: 0 when each start read `System.nanoTime` itself, the watchdog's period (50 ms)
     * when the recorder took a coarse clock ([FlightRecorder.NanoClock.resolutionMicros]). Arrival gaps
     * between ranks shorter than this say nothing; the analyzer discounts them. 0 in dumps written
     * before the field existed.
     */
    public val clockResolutionMicros: Long = 0L,
) {
    public companion object {
        /** The value of [schema]. */
        public const val SCHEMA: String = "tpcomm.flight-recorder"

        /** The version this library writes and reads. */
        public const val SCHEMA_VERSION: Int = 1
    }
}

/** The reason a dump is written, as in [FlightRecorderDump.reason]. */
internal enum class DumpReason(val text: String) {
    Timeout("timeout"), Mismatch("mismatch"), Aborted("aborted"), Cancelled("cancelled"), Failed("failed"),
    Close("close"), Shutdown("shutdown"), OnDemand("on-demand"), Exception("exception"),
}
