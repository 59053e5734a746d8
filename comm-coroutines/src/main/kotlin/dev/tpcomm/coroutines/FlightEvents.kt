package dev.tpcomm.coroutines

import jdk.jfr.Category
import jdk.jfr.DataAmount
import jdk.jfr.Description
import jdk.jfr.Event
import jdk.jfr.Label
import jdk.jfr.Name
import jdk.jfr.StackTrace
import jdk.jfr.Threshold

/**
 * The JDK Flight Recorder events of tpcomm (category "tpcomm"), emitted by every [FlightRecorder]:
 * `dev.tpcomm.Collective`, `dev.tpcomm.PointToPoint`, `dev.tpcomm.Split` (one per operation, from
 * its start to its completion or failure) and `dev.tpcomm.Abort` (an instant event).
 *
 * With no recording running, or these events disabled, an operation costs one `isEnabled` check
 * (constant false until a recording turns them on) and allocates nothing. An operation that never
 * finishes emits no event (the flight-recorder dump shows it).
 */
internal object FlightEvents {
    /** The fields every operation event carries. Absent root, peer, tag are -1 (any source is -1 too: see the peer's label). */
    @Category("tpcomm")
    @StackTrace(false)
    @Threshold("1 ms") // in recordings that do not name these events (e.g. the JDK's default.jfc): slow operations only
    internal abstract class OperationEvent : Event() {
        @JvmField @Label("Backend") var backend: String? = null
        @JvmField @Label("Communicator") var communicator: String? = null
        @JvmField @Label("Rank") var rank: Int = 0
        @JvmField @Label("World Size") var worldSize: Int = 0
        @JvmField @Label("Sequence") @Description("The communicator's operation number, from 1") var sequence: Long = 0
        @JvmField @Label("Collective Sequence") @Description("The collective's number among the communicator's collectives, 0 for point-to-point") var collectiveSequence: Long = 0
        @JvmField @Label("Operation") var operation: String? = null
        @JvmField @Label("Data Type") var dtype: String? = null
        @JvmField @Label("Shape") var shape: String? = null
        @JvmField @Label("Bytes") @DataAmount var bytes: Long = 0
        @JvmField @Label("Root") @Description("Root of a rooted collective, -1 when none") var root: Int = -1
        @JvmField @Label("Peer") @Description("Peer of a point-to-point call (-1 for any source or none)") var peer: Int = -1
        @JvmField @Label("Tag") @Description("Tag of a point-to-point call, -1 when none") var tag: Int = -1
        @JvmField @Label("Reduce Op") var reduceOp: String? = null
        @JvmField @Label("Outcome") @Description("ok, timeout, mismatch, aborted, cancelled or error") var outcome: String? = null
        @JvmField @Label("Error") var error: String? = null
    }

    @Name("dev.tpcomm.Collective")
    @Label("Collective")
    @Category("tpcomm")
    @Description("One collective operation of a tpcomm communicator, from its start to its completion or failure")
    @StackTrace(false)
    internal class CollectiveEvent : OperationEvent()

    @Name("dev.tpcomm.PointToPoint")
    @Label("Point-to-Point")
    @Category("tpcomm")
    @Description("One send, receive or probe of a tpcomm communicator")
    @StackTrace(false)
    internal class PointToPointEvent : OperationEvent()

    @Name("dev.tpcomm.Split")
    @Label("Split")
    @Category("tpcomm")
    @Description("A split, group or duplicate of a tpcomm communicator")
    @StackTrace(false)
    internal class SplitEvent : OperationEvent()

    @Name("dev.tpcomm.Abort")
    @Label("Abort")
    @Category("tpcomm")
    @Description("A tpcomm communicator aborted")
    @StackTrace(false)
    internal class AbortEvent : Event() {
        @JvmField @Label("Backend") var backend: String? = null
        @JvmField @Label("Communicator") var communicator: String? = null
        @JvmField @Label("Rank") var rank: Int = 0
        @JvmField @Label("World Size") var worldSize: Int = 0
        @JvmField @Label("Last Sequence") var lastSequence: Long = 0
        @JvmField @Label("Cause") var cause: String? = null
    }

    private val COLLECTIVE = CollectiveEvent()
    private val P2P = PointToPointEvent()
    private val SPLIT = SplitEvent()
    private val ABORT = AbortEvent()
    private val SPLITS = setOf("split", "group", "duplicate", "splitType")

    /** A begun event for a new operation, or null when its event type is not enabled. */
    fun begin(operation: String, peer: Int): OperationEvent? {
        val e: OperationEvent = if (peer != FlightRecorder.NONE) {
            if (!P2P.isEnabled) return null
            PointToPointEvent()
        } else {
            if (!COLLECTIVE.isEnabled && !SPLIT.isEnabled) return null
            if (operation in SPLITS) {
                if (!SPLIT.isEnabled) return null
                SplitEvent()
            } else {
                if (!COLLECTIVE.isEnabled) return null
                CollectiveEvent()
            }
        }
        e.begin()
        return e
    }

    /** Ends [e] and commits it with the fields of [entry] when it passes the recording's threshold. */
    fun commit(e: OperationEvent, recorder: FlightRecorder, entry: FlightRecorder.Entry, outcome: FlightRecorder.Outcome, error: String?) {
        e.end()
        if (!e.shouldCommit()) return
        e.backend = recorder.backend
        e.communicator = recorder.communicator
        e.rank = recorder.rank
        e.worldSize = recorder.worldSize
        e.sequence = entry.sequence
        e.collectiveSequence = entry.collectiveSequence
        e.operation = entry.operation
        e.dtype = entry.dtypeOrNull()?.name
        e.shape = entry.shapeOrNull()?.toString()
        e.bytes = entry.bytes()
        e.root = entry.root().let { if (it == FlightRecorder.NONE) -1 else it }
        e.peer = entry.peer().let { if (it == FlightRecorder.NONE) -1 else it }
        e.tag = entry.tag().let { if (it == FlightRecorder.NONE) -1 else it }
        e.reduceOp = entry.reduceOpOrNull()?.name
        e.outcome = outcome.name.lowercase()
        e.error = if (outcome == FlightRecorder.Outcome.Ok) null else error
        e.commit()
    }

    /** Emits an abort event of [recorder] when enabled. */
    fun abort(recorder: FlightRecorder, cause: Throwable) {
        if (!ABORT.isEnabled) return
        val e = AbortEvent()
        e.backend = recorder.backend
        e.communicator = recorder.communicator
        e.rank = recorder.rank
        e.worldSize = recorder.worldSize
        e.lastSequence = recorder.nextSequenceNumber - 1
        e.cause = cause.toString()
        e.commit()
    }
}
