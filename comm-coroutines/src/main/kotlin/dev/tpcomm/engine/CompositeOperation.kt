package dev.tpcomm.engine

import dev.tpcomm.CommunicationException
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.spi.CollectiveOp
import dev.tpcomm.spi.ObjectProtocol
import kotlin.coroutines.AbstractCoroutineContextElement
import kotlin.coroutines.CoroutineContext

/**
 * A composite operation in progress (an object operation, a monitored barrier): the user's one
 * operation, recorded as [entry] with its own sequence number, made of steps its backend issues one
 * after another. It rides in the coroutine context of the call, so that [front] recognises the
 * steps (its operations called from within): they are recorded under [entry]
 * ([FlightRecorder.step]; their exceptions name the composite), their signatures carry [op], and
 * the composite's deadline, from its call, ends whichever step is in flight.
 *
 * Owned by [front], from its call to its end. [steps] is guarded by the front's issue lock; the
 * volatile fields are written there and read by the deadline scan.
 */
internal class CompositeOperation(
    /** The communicator whose operation this is. */
    @JvmField val front: CommunicatorFront,
    /** What the user called. */
    @JvmField val op: CollectiveOp,
    /** Its flight record. */
    @JvmField val entry: FlightRecorder.Entry,
    /** How the object protocol names its failures (the communicator's errors, this operation's number). */
    @JvmField val naming: ObjectProtocol.Naming,
    /** The composite's root, or -1. */
    @JvmField val root: Int,
) : AbstractCoroutineContextElement(Key) {
    /** The context key. */
    companion object Key : CoroutineContext.Key<CompositeOperation>

    /**
     * A reproducible reduction's op (set by [ReproducibleReductions] before its first step), or null:
     * its steps' signatures carry it ([dev.tpcomm.spi.CollectiveSignature.reproducibleOpWord]), so a
     * peer reducing with another op, or in the default mode, is a mismatch.
     */
    @Volatile var reproducibleOp: dev.tpcomm.ReduceOp? = null

    /** Steps numbered so far (guarded by the front's issue lock). */
    var steps: Int = 0

    /** The latest step's record: what the composite's deadline ends. */
    @Volatile var stepEntry: FlightRecorder.Entry? = null

    /** The latest step's call (null for a backend's own step). */
    @Volatile var stepCall: OperationCall? = null

    /** Set once the composite's deadline passed between steps: a later step is refused with it. */
    @Volatile var expired: CommunicationException? = null

    override fun toString(): String = "CompositeOperation(${op.apiName} #${entry.sequence})"
}
