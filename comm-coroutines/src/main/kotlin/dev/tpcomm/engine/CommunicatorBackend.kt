package dev.tpcomm.engine

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.MessageInfo
import dev.tpcomm.PointToPoint
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.spi.MonitoredBarrierChannel
import dev.tpcomm.spi.ObjectTransport

/**
 * What a backend supplies to the [CommunicatorFront] it is composed into (c10d's `Backend` behind
 * its `ProcessGroup`, torchcomms' `TorchCommBackend` behind `TorchComm`): how to issue and complete
 * an operation on its library, how to move point-to-point messages, how to abort and shut down, and
 * what it can do. Everything else (validation, the issue turn, records, numbering, deadlines,
 * retain and release, the first failure, close) is the front's, written once there; a backend
 * calls the front's services through [front] (its errors, its own operations' records, its
 * failures: [CommunicatorFront.abortWith], [CommunicatorFront.expire]).
 *
 * A backend is made first and handed to exactly one front, which [attaches][attach] itself before it
 * serves any call; the front then calls these members, never the user. The hooks' threading
 * and blocking rules are stated on each; none may be called concurrently with [shutdown]'s end.
 */
@InternalTpcommApi
public abstract class CommunicatorBackend {
    private var attached: CommunicatorFront? = null

    /** The front this backend is composed into (set once, by that front's constructor). */
    public val front: CommunicatorFront
        get() = attached ?: throw IllegalStateException("${javaClass.simpleName} is not composed into a CommunicatorFront yet")

    /** Called once by [front]'s constructor. */
    internal fun attach(front: CommunicatorFront) {
        check(attached == null) { "${javaClass.simpleName} is composed into a front already" }
        attached = front
    }

    /**
     * Why the front cannot start [operation] now ([collective]: a collective, which also needs every
     * peer still open), or null when it can: the backend's own reasons beyond the front's (a peer
     * that closed its communicator). The front refuses a closed or failed communicator itself,
     * first. Called under the issue lock; must not block. None by default.
     */
    public open fun refusal(operation: String, collective: Boolean): OperationFailure? = null

    /**
     * Issues [call] and returns its result when it completed without waiting (null: the operation's
     * own return value), or [CommunicatorFront.PENDING] when the caller must [await] it. Never
     * suspends. Throws an [OperationFailedSignal] (or the caller's `CancellationException`) when it
     * failed.
     */
    public abstract fun issue(call: OperationCall): Any?

    /** Waits for a [call] that [issue] left [CommunicatorFront.PENDING] and returns its result as [issue] does. */
    public abstract suspend fun await(call: OperationCall): Any?

    /** Sends [tensor] (retained by the front) to [dst]; returns once its buffer may be reused. */
    public abstract suspend fun issueSend(entry: FlightRecorder.Entry, tensor: Tensor, dst: Int, tag: Int)

    /** Receives into [tensor] (retained by the front) from [src]. */
    public abstract suspend fun issueRecv(entry: FlightRecorder.Entry, tensor: Tensor, src: Int, tag: Int): MessageInfo

    /** Waits for a message from [src] with [tag] without receiving it. */
    public abstract suspend fun issueProbe(entry: FlightRecorder.Entry, src: Int, tag: Int): MessageInfo

    /**
     * A new tensor for the output of the allocating collective [call]: what the front calls, after it
     * recorded the call and started its deadline, before it retains the tensors and [issue]s it (the
     * call's [OperationCall.output] is still null). Host memory by default; a backend whose
     * allocation can fail or wait (device memory, allocated on a device thread) overrides this, may
     * keep what it prepared in [OperationCall.state] (which [deadlinePassed], [notIssued] and [issue]
     * then see), and names [call] in its exception. When it throws, the front fails the call's record
     * with it, issues nothing, and tells the backend with [notIssued] (its peers cannot complete that
     * number).
     */
    public open suspend fun allocate(call: OperationCall, dtype: DType, shape: List<Int>): Tensor = Tensor.zeros(dtype, shape)

    /**
     * True when this backend issues a `sendRecv` batch as one operation of its library (NCCL's
     * group): the front then records the batch once (`sendRecv`), retains every tensor and calls
     * [issueGroupedBatch]. False by default: each element is its own send or receive, recorded as
     * `send` and `recv` record them, all issued at once (`PointToPointBatch`).
     */
    public open val groupsBatches: Boolean get() = false

    /**
     * Issues [ops] (every element checked, every tensor retained by the front) as one operation of
     * the library, recorded as [entry]; returns once all completed. Called only when [groupsBatches].
     */
    public open suspend fun issueGroupedBatch(entry: FlightRecorder.Entry, ops: List<PointToPoint>): List<MessageInfo> =
        throw UnsupportedOperationException("${front.backendName} does not group batches")

    /**
     * True when a call may wait in the backend's queue before it starts (a device thread shared by
     * communicators): the front records it as queued, and the backend marks the start with
     * [FlightRecorder.Entry.begin].
     */
    public open val queuesCalls: Boolean get() = false

    /**
     * Called when the front gives up on [call] after it was numbered and recorded, before [issue],
     * because of [cause]: its output could not be allocated, or its tensors could not be retained. A
     * backend that prepared something for it ([allocate]) lets it go (perhaps a second time:
     * idempotent). The front then aborts the communicator ([CommunicatorFront.abortNotIssued]): its
     * peers could never complete that number. Must not block.
     */
    public open fun notIssued(call: OperationCall, cause: Throwable) {}

    /**
     * The communicator failed with [cause], its first failure ([CommunicatorFront.abortWith];
     * [detail] is what the backend passed there, [CommunicatorFront.ABORT_FROM_FRONT] when the front
     * aborted: a numbered call given up, a caller's cancellation, `abort`): end on the library what
     * is still in flight and tell the peers what they must know (an abort notice, `ncclCommAbort`).
     * Called once, after the failure is recorded, on the thread that aborted: possibly the
     * watchdog's, while this communicator's own thread is blocked in a library call. Must not block.
     */
    public abstract fun aborting(cause: Throwable, detail: Int)

    /** Called with each communicator `split`, `group` or `duplicate` returned on this rank. */
    public open fun adopted(child: Communicator) {}

    /**
     * The operation recorded as [entry] ([call]: the collective's call; null for a point-to-point
     * call or the backend's own operation) is still in flight past the communicator's timeout: end
     * it with a [dev.tpcomm.CommunicationTimeoutException] that says what it waited for, and abort
     * what the backend must abort so that its peers end too ([CommunicatorFront.expire]; docs/semantics.md).
     * Called once per operation, on the watchdog's thread, while the caller may be blocked inside a
     * library call: must not block and must not call into a library that could wait on that call.
     */
    public abstract fun deadlinePassed(entry: FlightRecorder.Entry, call: OperationCall?)

    /**
     * The backend's part of the front's `close`, called once, after the front marked the
     * communicator closed and stopped its deadlines: fail what is still in flight, release native
     * resources, tell peers what they must know.
     */
    public abstract fun shutdown()

    /** Whether the front reduces floating-point sums reproducibly by default (`CommConfig.reproducibleReductions`). */
    public open val reproducibleReductions: Boolean get() = false

    /**
     * Whether this backend reduces the reproducible all-reduce or reduce of the host [tensor]
     * (`Sum` or `Avg`) itself, issued with [ExactReduction], giving [ExactSum]'s bits;
     * [ReproducibleReductions] then issues one collective in place of its composite. [gathers]: the
     * composite would gather every rank's whole input (a small tensor), so a backend that gathers
     * moves no more than it. The in-process backend always does (its ranks share memory: each
     * input is read once); MPI does when [gathers] (one `MPI_Allgather` or `MPI_Gather`, then
     * [ExactSum] on the host). The answer must depend only on what every rank's call shares (the
     * tensor's dtype and size), so every rank takes the same path.
     */
    public open fun reducesExactly(tensor: Tensor, gathers: Boolean): Boolean = false

    /**
     * Copies [tensor]'s bytes to [host] ([toHost]) or back, after the work issued on [tensor]: a step
     * of the composite operation in flight, made on every rank. Host tensors: a plain copy; the GPU
     * engine copies device tensors on its stream.
     */
    public open suspend fun hostCopy(tensor: Tensor, host: java.lang.foreign.MemorySegment, toHost: Boolean) {
        if (toHost) {
            java.lang.foreign.MemorySegment.copy(tensor.segment, 0, host, 0, tensor.byteSize)
        } else {
            java.lang.foreign.MemorySegment.copy(host, 0, tensor.segment, 0, tensor.byteSize)
        }
    }

    /**
     * How this backend moves the object operations' bytes: by default host tensors through the
     * front's own collectives and messages ([ObjectTransport.host]); a backend that refuses host
     * tensors stages them (the GPU engine). Its operations run as steps of the object operation.
     */
    public open val objectTransport: ObjectTransport get() = ObjectTransport.host(front)

    /**
     * The channel of this backend's monitored-barrier messages: one no user receive can match, with
     * the backend's abort. By default none: the front then uses `MonitoredBarrier.taggedChannel`.
     */
    public open val monitoredBarrierChannel: MonitoredBarrierChannel? get() = null
}
