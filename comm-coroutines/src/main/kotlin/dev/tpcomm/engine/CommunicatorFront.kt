package dev.tpcomm.engine

import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.MessageInfo
import dev.tpcomm.PointToPoint
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.FlightRecorded
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.spi.CollectiveOp
import dev.tpcomm.spi.CollectiveSignature
import dev.tpcomm.spi.CollectiveValidator
import dev.tpcomm.spi.CommunicationErrors
import dev.tpcomm.spi.MonitoredBarrier
import dev.tpcomm.spi.MonitoredBarrierChannel
import dev.tpcomm.spi.ObjectProtocol
import dev.tpcomm.spi.ObjectTransport
import dev.tpcomm.spi.PointToPointBatch
import kotlinx.coroutines.TimeoutCancellationException
import kotlinx.coroutines.currentCoroutineContext
import kotlinx.serialization.KSerializer

/**
 * The front of a communicator: the one place that owns, in one order, what every operation does
 * around the backend's data movement (PyTorch c10d's `ProcessGroup` in front of its `Backend`,
 * torchcomms' `TorchComm` in front of `TorchCommBackend`). The backend is composed into it
 * ([backend], a [CommunicatorBackend]), never a subclass of it: this class is final. docs/ARCHITECTURE.md draws the order:
 * **validate** ([CollectiveValidator], before anything is recorded or moved), wait for the **issue
 * turn** while another caller's composite operation holds it, **record**, **ensure usable** (the
 * front's closed and failed checks, then the backend's [CommunicatorBackend.refusal]) and **number** under one lock
 * ([CallOrder]: issue order is call order, also for concurrent callers), start the **deadline**,
 * **allocate** an allocating collective's output ([CommunicatorBackend.allocate]), **retain** the tensors, **issue**
 * ([CommunicatorBackend.issue], then [CommunicatorBackend.await]; the backend moves the call's signature, [OperationCall.encodeSignature]),
 * **complete or fail** with the named exception ([exceptionOf]), **release** the tensors. The paths
 * are [CollectiveIssue] and [PointToPointIssue]; composite operations (the object operations,
 * [monitoredBarrier]) are one operation each, with their steps recorded and signed under them.
 *
 * **Deadlines** run from the call to its end for every operation recorded here; the core's
 * `DeadlineWatchdog` thread hands one still in flight past the timeout to [CommunicatorBackend.deadlinePassed] once
 * (never before the timeout, at most about two watchdog periods after it), where the backend names
 * the timeout and the front's [expire] aborts the communicator. **Failure** (one state per
 * communicator and rank, the first wins: [failure], [abortWith]) and **close** (one flag, a final
 * idempotent [close], then the backend's [CommunicatorBackend.shutdown]) are the front's.
 *
 * A backend supplies only what differs ([CommunicatorBackend]: issue and await an operation, the
 * point-to-point moves, its refusals, abort, the deadline's action, shutdown, its capabilities).
 *
 * Thread-safe: operations may be called from any thread or coroutine; collectives are issued in
 * call order. Cancellation: a caller cancelled before [CommunicatorBackend.issue] issues nothing; one cancelled while
 * the backend waits aborts the communicator (docs/semantics.md, "Semantics every backend keeps":
 * peers get a named exception, no tensor is written afterwards).
 */
@InternalTpcommApi
public class CommunicatorFront(
    final override val rank: Int,
    final override val worldSize: Int,
    final override val device: Device,
    final override val backendName: String,
    /** This communicator's flight recorder. */
    public val recorder: FlightRecorder,
    /** The core's argument checks, built from the backend's capabilities. */
    public val validator: CollectiveValidator,
    /** How long any operation may take from its call to its end ([kotlin.time.Duration.INFINITE]: no limit). */
    timeout: kotlin.time.Duration,
    /** What comparing signatures costs the backend ([SignatureCheck]): with [checkConsistency], decides [checksSignatures]. */
    signatureCheck: SignatureCheck = SignatureCheck.ByDefault,
    /** `CommConfig.checkConsistency`: null when the user did not set it. */
    checkConsistency: Boolean? = null,
    /**
     * How long [split], [group] and [duplicateCollective] may take from their call
     * (`CommConfig.effectiveCreationTimeout`; [kotlin.time.Duration.INFINITE]: no limit); [timeout]
     * when the backend does not say.
     */
    creationTimeout: kotlin.time.Duration = timeout,
    /** What this communicator's operations do on the library ([CommunicatorBackend]), composed into this front. */
    public val backend: CommunicatorBackend,
) : Communicator, FlightRecorded {
    init {
        backend.attach(this)
    }

    final override val flightRecorder: FlightRecorder get() = recorder

    /**
     * Whether this communicator compares the ranks' signatures of each collective before it moves
     * data ([OperationCall.encodeSignature], [compareSignatures]): decided here once, from the backend's
     * [SignatureCheck] and `CommConfig.checkConsistency`; the backend moves the words when true.
     */
    public val checksSignatures: Boolean = signatureCheck.enabled(checkConsistency, worldSize)

    /** The one builder of this communicator's exceptions (rank, backend, operation, sequence, flight-recorder dump). */
    public val errors: CommunicationErrors = CommunicationErrors(rank, backendName) { recorder.dumpJson() }

    /** Numbers, records and times this communicator's calls in call order ([CallOrder]). */
    private val order = CallOrder(this, recorder, timeout, creationTimeout)

    /** The path of every collective from its numbering to its release ([CollectiveIssue]). */
    private val issuePath = CollectiveIssue(this, order)

    /** The path of every point-to-point call from its record to its release ([PointToPointIssue]). */
    private val p2pPath = PointToPointIssue(this)

    // ------------------------------------------------------------------ lifecycle

    /** Set once by [close]: the one closed flag of this communicator. */
    private val closedFlag = java.util.concurrent.atomic.AtomicBoolean(false)

    /** True once [close] ran on this rank. Thread-safe. */
    public val isClosed: Boolean get() = closedFlag.get()

    /**
     * Closes this communicator on this rank, once (later calls do nothing): from here every call is
     * refused with [dev.tpcomm.CommunicatorAbortedException] ("the communicator was closed; create a
     * new one"), the flight recorder closes, the deadlines stop, then the backend's [CommunicatorBackend.shutdown]
     * releases what it holds and fails what is still in flight, and the reproducible reductions'
     * staging buffers go back to the host pool. Thread-safe; never throws for a
     * communicator already closed.
     */
    final override fun close() {
        if (!closedFlag.compareAndSet(false, true)) return
        recorder.close()
        stopDeadlines()
        backend.shutdown()
        ReproducibleReductions.release(this)
    }

    /** Throws (after failing [entry] with it) the named exception when [operation] is refused now ([refused]); under [CallOrder]'s lock. */
    internal fun refuseUnusable(operation: String, entry: FlightRecorder.Entry, collective: Boolean) {
        val f = refused(operation, collective) ?: return
        val e = exceptionOf(f, operation, entry.sequence)
        entry.fail(e)
        throw e
    }

    /**
     * The exception a call of [operation] (sequence [sequence]) ends with now because this
     * communicator is closed or failed (the front's one wording each), or null while it is usable:
     * for a backend's own check right before a library call, when the state may have changed since
     * the front's. Thread-safe; never blocks.
     */
    @InternalTpcommApi
    public fun unusable(operation: String, sequence: Long): CommunicationException? {
        if (!closedFlag.get() && failures.cause == null) return null
        return exceptionOf(refused(operation, collective = false) ?: return null, operation, sequence)
    }

    /** Why [operation] is refused now: closed, failed (the front's one wording each), or the backend's [CommunicatorBackend.refusal]. */
    private fun refused(operation: String, collective: Boolean): OperationFailure? {
        if (closedFlag.get()) {
            val closed = closedException()
            return OperationFailure(OperationFailure.ABORTED, abortedMessage(closed), closed)
        }
        failures.cause?.let { return abortedFailure(it) }
        return backend.refusal(operation, collective)
    }

    // ------------------------------------------------------------------ failure, abort and the exceptions ([FrontFailure])

    /** This communicator's one failure state and exception factory. */
    private val failures = FrontFailure(errors, recorder, rank, worldSize, backendName, { isClosed }) { cause, detail -> backend.aborting(cause, detail) }

    /** The first failure of this communicator on this rank, or null while it is usable ([FrontFailure.cause]). Thread-safe. */
    public val failure: Throwable? get() = failures.cause

    final override val isAborted: Boolean get() = failures.isAborted

    /** See [Communicator.abort]: the front records the failure, then the backend ends what is in flight ([CommunicatorBackend.aborting]). */
    final override fun abort(reason: String): Boolean =
        abortWith(errors.aborted(ABORT, CommunicationErrors.NO_SEQUENCE, "rank $rank aborted the communicator: $reason"), ABORT_FROM_FRONT)

    /** Records [cause] as the failure unless one came first, then the backend's [CommunicatorBackend.aborting] ([FrontFailure.abortWith]). Never blocks. */
    @InternalTpcommApi
    public fun abortWith(cause: Throwable, detail: Int = ABORT_FROM_FRONT): Boolean = failures.abortWith(cause, detail)

    /** The deadline of [entry] passed and the backend named it [timeout] ([FrontFailure.expire]); called from [CommunicatorBackend.deadlinePassed]. */
    @InternalTpcommApi
    public fun expire(entry: FlightRecorder.Entry, timeout: CommunicationTimeoutException, detail: Int = ABORT_FROM_FRONT): Boolean =
        failures.expire(entry, timeout, detail)

    /** The front's rule for a call numbered but given up before its issue ([FrontFailure.abortNotIssued]). Never blocks. */
    @InternalTpcommApi
    public fun abortNotIssued(operation: String, sequence: Long, cause: Throwable): CommunicationException? = failures.abortNotIssued(operation, sequence, cause)

    /** [CommunicatorBackend.notIssued], then the front's rule ([abortNotIssued]) for [call], given up before [CommunicatorBackend.issue] because of [cause]. */
    internal fun gaveUp(call: OperationCall, cause: Throwable) {
        try {
            backend.notIssued(call, cause)
        } finally {
            abortNotIssued(call.entry.operation, call.entry.sequence, cause)
        }
    }

    /**
     * Stops timing this communicator's operations (idempotent). [close] calls it; a backend may call
     * it earlier when it ends every operation itself.
     */
    public fun stopDeadlines() {
        order.stopDeadlines()
    }

    /** How many operations the deadline queue holds (finished ones not yet dropped included); for tests. */
    internal val trackedDeadlines: Int get() = order.trackedDeadlines

    /** The named exception of [failure] in [operation] (flight-record sequence [sequence]; [FrontFailure.exceptionOf]). */
    public fun exceptionOf(failure: OperationFailure, operation: String, sequence: Long): CommunicationException =
        failures.exceptionOf(failure, operation, sequence)

    /** [exceptionOf] a failure of [kind] (one of [OperationFailure]'s kinds) in [operation], saying [message]. */
    public fun exceptionOf(kind: Int, operation: String, sequence: Long, message: String, cause: Throwable? = null): CommunicationException =
        failures.exceptionOf(OperationFailure(kind, message, cause), operation, sequence)

    /** The exception of a communicator its user closed ([FrontFailure.closed]), which later calls name. */
    public fun closedException(): CommunicationException = failures.closed

    /** The message of a call refused because of an earlier failure [cause] (or the user's close). */
    public fun abortedMessage(cause: Throwable): String = errors.abortedMessage(cause)

    /** Why the communicator aborts when this rank is cancelled inside [operation] ([where]; [FrontFailure.cancellationReason]). */
    public fun cancellationReason(operation: String, sequence: Long, cause: Throwable?, where: String): CommunicationException =
        failures.cancellationReason(operation, sequence, cause, where)

    /** Why a call is refused once the communicator failed with [cause] ([FrontFailure.abortedFailure]). */
    public fun abortedFailure(cause: Throwable): OperationFailure = failures.abortedFailure(cause)

    /** The mismatch among every rank's signatures of collective [sequence], or null ([FrontFailure.compareSignatures]). */
    public fun compareSignatures(all: LongArray, sequence: Long, description: String): OperationFailure? = failures.compareSignatures(all, sequence, description)

    // ------------------------------------------------------------------ collectives

    final override suspend fun allReduce(tensor: Tensor, op: ReduceOp): Tensor = allReduce(tensor, op, mode = null)

    /**
     * [allReduce] with the reproducible mode given ([dev.tpcomm.coroutines.reproducible]'s view: no coroutine
     * context switch per call), or, when [mode] is null, read from the caller's context and the
     * communicator's setting.
     */
    internal suspend fun allReduce(tensor: Tensor, op: ReduceOp, mode: Boolean?): Tensor {
        validator.allReduce(tensor, op)
        if (ReproducibleReductions.selected(this, tensor.dtype, op, mode)) return ReproducibleReductions.allReduce(this, tensor, op)
        return issuePath.collective(CollectiveOp.AllReduce, tensor, tensor, tensor, op, -1, 0, null, null, null, tensor)
    }

    final override suspend fun broadcast(tensor: Tensor, root: Int): Tensor {
        validator.broadcast(tensor, root)
        return issuePath.collective(CollectiveOp.Broadcast, tensor, tensor, tensor, null, root, 0, null, null, null, tensor)
    }

    final override suspend fun reduce(tensor: Tensor, root: Int, op: ReduceOp): Tensor = reduce(tensor, root, op, mode = null)

    /** [reduce] with the reproducible mode given, or read (null): see [allReduce]'s. */
    internal suspend fun reduce(tensor: Tensor, root: Int, op: ReduceOp, mode: Boolean?): Tensor {
        validator.reduce(tensor, root, op)
        if (ReproducibleReductions.selected(this, tensor.dtype, op, mode)) return ReproducibleReductions.reduce(this, tensor, root, op)
        return issuePath.collective(CollectiveOp.Reduce, tensor, tensor, tensor, op, root, 0, null, null, null, tensor)
    }

    // The allocating forms check their input once (the output is fresh) and go straight to the
    // collective, which allocates the output once the call is recorded ([allocating]).

    final override suspend fun allGather(input: Tensor, dim: Int): Tensor {
        val shape = validator.allGatherShape(input, dim)
        return issuePath.allocating(CollectiveOp.AllGather, input, shape, null, -1, CollectiveValidator.normalise(input, dim), null, null)
    }

    final override suspend fun reduceScatter(input: Tensor, op: ReduceOp, dim: Int): Tensor = reduceScatter(input, op, dim, mode = null)

    /** [reduceScatter] with the reproducible mode given, or read (null): see [allReduce]'s. */
    internal suspend fun reduceScatter(input: Tensor, op: ReduceOp, dim: Int, mode: Boolean?): Tensor {
        val shape = validator.reduceScatterShape(input, op, dim)
        if (ReproducibleReductions.selected(this, input.dtype, op, mode)) return ReproducibleReductions.reduceScatter(this, Tensor.zeros(input.dtype, shape), input, op, CollectiveValidator.normalise(input, dim))
        return issuePath.allocating(CollectiveOp.ReduceScatter, input, shape, op, -1, CollectiveValidator.normalise(input, dim), null, null)
    }

    final override suspend fun allGatherV(input: Tensor, sizes: List<Int>): Tensor {
        val shape = validator.allGatherVShape(input, sizes, rank)
        return issuePath.allocating(CollectiveOp.AllGatherV, input, shape, null, -1, 0, sizes.toList(), null)
    }

    final override suspend fun reduceScatterV(input: Tensor, sizes: List<Int>, op: ReduceOp): Tensor = reduceScatterV(input, sizes, op, mode = null)

    /** [reduceScatterV] with the reproducible mode given, or read (null): see [allReduce]'s. */
    internal suspend fun reduceScatterV(input: Tensor, sizes: List<Int>, op: ReduceOp, mode: Boolean?): Tensor {
        val shape = validator.reduceScatterVShape(input, sizes, op, rank)
        if (ReproducibleReductions.selected(this, input.dtype, op, mode)) return ReproducibleReductions.reduceScatterV(this, Tensor.zeros(input.dtype, shape), input, sizes, op)
        return issuePath.allocating(CollectiveOp.ReduceScatterV, input, shape, op, -1, 0, sizes.toList(), null)
    }

    final override suspend fun allGatherInto(output: Tensor, input: Tensor, dim: Int): Tensor {
        val d = validator.allGatherInto(output, input, dim)
        return issuePath.collective(CollectiveOp.AllGather, input, output, input, null, -1, d, null, null, null, output)
    }

    final override suspend fun reduceScatterInto(output: Tensor, input: Tensor, op: ReduceOp, dim: Int): Tensor = reduceScatterInto(output, input, op, dim, mode = null)

    /** [reduceScatterInto] with the reproducible mode given, or read (null): see [allReduce]'s. */
    internal suspend fun reduceScatterInto(output: Tensor, input: Tensor, op: ReduceOp, dim: Int, mode: Boolean?): Tensor {
        val d = validator.reduceScatterInto(output, input, op, dim)
        if (ReproducibleReductions.selected(this, input.dtype, op, mode)) return ReproducibleReductions.reduceScatter(this, output, input, op, d)
        return issuePath.collective(CollectiveOp.ReduceScatter, input, output, input, op, -1, d, null, null, null, output)
    }

    final override suspend fun gather(input: Tensor, root: Int, dim: Int): Tensor? {
        val shape = validator.gatherShape(input, root, dim)
        val d = CollectiveValidator.normalise(input, dim)
        if (rank == root) return issuePath.allocating(CollectiveOp.Gather, input, shape, null, root, d, null, null)
        return issuePath.collective(CollectiveOp.Gather, input, null, input, null, root, d, null, null, null, null)
    }

    final override suspend fun scatter(output: Tensor, input: Tensor?, root: Int, dim: Int) {
        val d = validator.scatter(output, input, root, rank, dim)
        return issuePath.collective(CollectiveOp.Scatter, if (rank == root) input else null, output, output, null, root, d, null, null, null, Unit)
    }

    final override suspend fun allToAll(input: Tensor, dim: Int): Tensor {
        val d = validator.allToAll(input, dim)
        return issuePath.allocating(CollectiveOp.AllToAll, input, input.shape, null, -1, d, null, null)
    }

    final override suspend fun allGatherVInto(output: Tensor, input: Tensor, sizes: List<Int>): Tensor {
        validator.allGatherVInto(output, input, sizes, rank)
        return issuePath.collective(CollectiveOp.AllGatherV, input, output, input, null, -1, 0, sizes.toList(), null, null, output)
    }

    final override suspend fun reduceScatterVInto(output: Tensor, input: Tensor, sizes: List<Int>, op: ReduceOp): Tensor = reduceScatterVInto(output, input, sizes, op, mode = null)

    /** [reduceScatterVInto] with the reproducible mode given, or read (null): see [allReduce]'s. */
    internal suspend fun reduceScatterVInto(output: Tensor, input: Tensor, sizes: List<Int>, op: ReduceOp, mode: Boolean?): Tensor {
        validator.reduceScatterVInto(output, input, sizes, op, rank)
        if (ReproducibleReductions.selected(this, input.dtype, op, mode)) return ReproducibleReductions.reduceScatterV(this, output, input, sizes, op)
        return issuePath.collective(CollectiveOp.ReduceScatterV, input, output, input, op, -1, 0, sizes.toList(), null, null, output)
    }

    /** As the interface's default, but the arguments are checked once (the output is fresh, so only the input needs it). */
    final override suspend fun allToAllV(input: Tensor, inputSplits: List<Int>, outputSplits: List<Int>): Tensor {
        val shape = validator.allToAllVShape(input, inputSplits, outputSplits)
        return issuePath.allocating(CollectiveOp.AllToAllV, input, shape, null, -1, 0, inputSplits.toList(), outputSplits.toList())
    }

    final override suspend fun allToAllVInto(output: Tensor, input: Tensor, inputSplits: List<Int>, outputSplits: List<Int>): Tensor {
        validator.allToAllVInto(output, input, inputSplits, outputSplits)
        return issuePath.collective(CollectiveOp.AllToAllV, input, output, input, null, -1, 0, inputSplits.toList(), outputSplits.toList(), null, output)
    }

    final override suspend fun barrier() {
        return issuePath.collective(CollectiveOp.Barrier, null, null, null, null, -1, 0, null, null, null, Unit)
    }

    final override suspend fun split(color: Int?, key: Int): Communicator? {
        validator.split(color)
        val extra = intArrayOf(if (color == null) 0 else 1, color ?: 0, key)
        return (issuePath.collective<Any?>(CollectiveOp.Split, null, null, null, null, -1, 0, null, null, extra, null) as Communicator?)?.also { backend.adopted(it) }
    }

    final override suspend fun group(ranks: List<Int>): Communicator? {
        validator.group(ranks)
        return (issuePath.collective<Any?>(CollectiveOp.Group, null, null, null, null, -1, 0, null, null, ranks.toList(), null) as Communicator?)?.also { backend.adopted(it) }
    }

    /**
     * A collective of the backend's own that makes a new communicator over the same ranks (MPI's
     * `duplicate`): issued as [split] and [group] are ([CollectiveOp.Duplicate], numbered, recorded,
     * signed, timed, completed or failed here; [extra], the backend's settings for it, is the call's
     * [OperationCall.extra]) and [CommunicatorBackend.adopted]. The backend's [CommunicatorBackend.await] makes the communicator.
     */
    public suspend fun duplicateCollective(extra: Any?): Communicator =
        (issuePath.collective<Any?>(CollectiveOp.Duplicate, null, null, null, null, -1, 0, null, null, extra, null) as Communicator).also { backend.adopted(it) }

    /**
     * Hands the tensors the front retained for the operation recorded as [entry] (a collective's
     * input and output, a message's tensor) to the backend: the front no longer releases them when
     * the call returns, and the backend releases them ([releaseHandedOver] for a collective, the
     * tensor's [Tensor.release] for a message) once the library is done with them, and never while
     * the library may still touch them (after a native operation that failed or was abandoned in
     * flight: they then stay retained). For a backend whose operation may outlive its caller (a
     * caller released at its deadline or by its cancellation while a non-blocking MPI operation is
     * still in flight). Call it on the caller's thread, before the call can return ([CommunicatorBackend.await],
     * [CommunicatorBackend.issueSend], [CommunicatorBackend.issueRecv]); one retain, the front's, is what keeps the memory alive.
     */
    @InternalTpcommApi
    public fun handOverTensors(entry: FlightRecorder.Entry) {
        entry.tensorsHandedOver = true
    }

    /** Releases the tensors of collective [call] that the front retained and [handOverTensors] handed to the backend. */
    @InternalTpcommApi
    public fun releaseHandedOver(call: OperationCall) {
        issuePath.release(call.input, call.output, call.heldOutput)
    }

    /**
     * What a caller whose call ended with [t] is told: its own deadline (`withTimeout`,
     * `awaitAll(timeout)`) that aborted the communicator ([cancellationReason]) is that named
     * [CommunicationTimeoutException], on every backend; anything else is [t] itself.
     */
    @PublishedApi
    internal fun callerSees(t: Throwable): Throwable {
        if (t !is TimeoutCancellationException) return t
        val f = failures.cause as? CommunicationTimeoutException ?: return t
        val c = f.cause
        return if (c === t || c is TimeoutCancellationException) f else t
    }

    /**
     * [t] as the caller sees it, after failing [entry] with it: an [OperationFailedSignal] becomes
     * its named exception; anything else (a named exception, the caller's cancellation) stays.
     */
    @PublishedApi
    internal fun failure(entry: FlightRecorder.Entry, t: Throwable): Throwable {
        val ex = if (t is OperationFailedSignal) exceptionOf(t.failure, entry.operation, entry.sequence) else t
        entry.fail(ex)
        return ex
    }

    // ------------------------------------------------------------------ point to point

    final override suspend fun send(tensor: Tensor, dst: Int, tag: Int) {
        validator.send(tensor, dst, tag)
        p2pPath.send(tensor, dst, tag)
    }

    final override suspend fun recv(tensor: Tensor, src: Int, tag: Int): MessageInfo {
        validator.recv(tensor, src, tag)
        return p2pPath.recv(tensor, src, tag)
    }

    final override suspend fun probe(src: Int, tag: Int): MessageInfo {
        validator.probe(src, tag)
        val entry = beginPointToPoint("probe", null, src, tag)
        return recorded(entry) { backend.issueProbe(entry, src, tag) }
    }

    /**
     * Runs [block], the backend's part of the operation recorded as [entry], then completes the
     * record, or fails it and throws the named exception ([OperationFailedSignal]s become theirs).
     */
    @InternalTpcommApi
    public suspend inline fun <T> recorded(entry: FlightRecorder.Entry, block: () -> T): T {
        val r = try {
            block()
        } catch (t: Throwable) {
            throw failure(entry, callerSees(t))
        }
        entry.complete()
        return r
    }

    /**
     * Every element checked first; then each as its own send or receive ([PointToPointBatch]), or,
     * when the backend [CommunicatorBackend.groupsBatches], the batch as one operation: recorded once, every tensor
     * retained until it ends, the numbered-but-never-issued rule if a tensor was closed meanwhile.
     */
    final override suspend fun sendRecv(ops: List<PointToPoint>): List<MessageInfo> {
        validator.sendRecv(ops)
        if (ops.isEmpty()) return emptyList()
        if (!backend.groupsBatches) return PointToPointBatch.run(ops, { o -> p2pPath.send(o.tensor, o.peer, o.tag) }, { o -> p2pPath.recv(o.tensor, o.peer, o.tag) })
        return p2pPath.groupedBatch(ops)
    }

    /**
     * Records a point-to-point call (or a backend's own message, such as a monitored barrier's) and
     * refuses it when the communicator is unusable. Its outcome is the caller's to record. Within a
     * composite operation of this communicator (an object message, a monitored barrier), the
     * message is recorded as a step of it, under its name and number.
     */
    public suspend fun beginPointToPoint(name: String, tensor: Tensor?, peer: Int, tag: Int): FlightRecorder.Entry =
        order.beginPointToPoint(name, tensor, peer, tag, currentCoroutineContext()[CompositeOperation]?.takeIf { it.front === this })

    /**
     * Records a collective the backend runs itself, outside [CommunicatorBackend.issue] (its staged object collectives,
     * say): as [beginPointToPoint], with [root] (or [FlightRecorder.NONE]) and a collective sequence
     * number, refused when the communicator cannot start a collective, and numbered in call order
     * with the front's own collectives (it waits for the issue turn as they do, and then holds it until
     * the operation's record completes or fails). Within a composite
     * operation of this communicator it is a step of it. Its outcome is the caller's to record ([recorded]).
     */
    public suspend fun beginOwnCollective(name: String, root: Int = FlightRecorder.NONE): FlightRecorder.Entry =
        order.beginOwnCollective(name, root, currentCoroutineContext()[CompositeOperation]?.takeIf { it.front === this })

    /**
     * Writes the signature of the collective step recorded as [entry] (a backend's own step, begun
     * with [beginOwnCollective] inside a composite operation) into [dst] at [at], as [OperationCall.encodeSignature]
     * writes a step's: the composite's operation and root, no tensor, the step's index. Returns false
     * (writing nothing) when [entry] is not such a step.
     */
    public fun encodeStepSignature(entry: FlightRecorder.Entry, dst: LongArray, at: Int): Boolean {
        val c = entry.composite as? CompositeOperation ?: return false
        CollectiveSignature.encode(dst, at, c.op, null, null, root = if (c.op.hasRoot) c.root else -1, extra = entry.stepIndex.toLong())
        c.reproducibleOp?.let { dst[at + 3] = CollectiveSignature.reproducibleOpWord(it) }
        return true
    }

    // ------------------------------------------------------------------ composite operations

    /**
     * [ReproducibleReductions]' composite operation [op] reducing with [reduceOp]: one operation of
     * this communicator, whose steps' signatures carry the reproducible [reduceOp].
     */
    internal suspend fun <R> reproducibleComposite(op: CollectiveOp, root: Int, reduceOp: ReduceOp, block: suspend () -> R): R =
        composite(op, root) { c -> c.reproducibleOp = reduceOp; block() }

    /**
     * [op] (all-reduce, or reduce to [root]) of [tensor] with [reduceOp] (`Sum` or `Avg`) reduced
     * by the backend exactly ([CommunicatorBackend.reducesExactly], [ExactReduction]): one
     * collective, its signature's `op` word the reproducible one.
     */
    internal suspend fun exactReduction(op: CollectiveOp, tensor: Tensor, reduceOp: ReduceOp, root: Int): Tensor =
        issuePath.collective(op, tensor, tensor, tensor, reduceOp, root, 0, null, null, ExactReduction, tensor)

    /** [CallOrder.composite]: [block], the steps of [op], as one operation of this communicator. */
    private suspend fun <R> composite(
        op: CollectiveOp, root: Int = FlightRecorder.NONE, peer: Int = FlightRecorder.NONE, tag: Int = FlightRecorder.NONE,
        block: suspend (CompositeOperation) -> R,
    ): R = order.composite(op, root, peer, tag, block)

    /**
     * One operation, as the user called it: recorded once, issued in call order (its length exchange and
     * payload are steps that no other call of this rank interleaves with), failing with exceptions
     * that name it and its sequence number. See [Communicator.allGatherObject].
     */
    final override suspend fun <T> allGatherObject(value: T, serializer: KSerializer<T>): List<T> =
        composite(CollectiveOp.AllGatherObject) { c -> ObjectProtocol.allGather(this, backend.objectTransport, value, serializer, c.naming) }

    /** As [allGatherObject]; a null [value] on the root fails there and names the root on every other rank at once. */
    final override suspend fun <T> broadcastObject(value: T?, root: Int, serializer: KSerializer<T>): T {
        dev.tpcomm.spi.CollectiveChecks.root(root, worldSize, CollectiveOp.BroadcastObject.apiName)
        return composite(CollectiveOp.BroadcastObject, root) { c -> ObjectProtocol.broadcast(this, backend.objectTransport, value, root, serializer, c.naming) }
    }

    /** As [allGatherObject]. */
    final override suspend fun <T> gatherObject(value: T, root: Int, serializer: KSerializer<T>): List<T>? {
        dev.tpcomm.spi.CollectiveChecks.root(root, worldSize, CollectiveOp.GatherObject.apiName)
        return composite(CollectiveOp.GatherObject, root) { c -> ObjectProtocol.gather(this, backend.objectTransport, value, root, serializer, c.naming) }
    }

    /** As [allGatherObject]. */
    final override suspend fun <T> scatterObject(values: List<T>?, root: Int, serializer: KSerializer<T>): T {
        dev.tpcomm.spi.CollectiveChecks.root(root, worldSize, CollectiveOp.ScatterObject.apiName)
        return composite(CollectiveOp.ScatterObject, root) { c -> ObjectProtocol.scatter(this, backend.objectTransport, values, root, serializer, c.naming) }
    }

    /** One point-to-point operation of two messages (length, bytes), recorded once; see [Communicator.sendObject]. */
    final override suspend fun <T> sendObject(value: T, dst: Int, tag: Int, serializer: KSerializer<T>) {
        validator.sendObject(dst, tag)
        composite(CollectiveOp.SendObject, peer = dst, tag = tag) { c -> ObjectProtocol.send(this, backend.objectTransport, validator, value, dst, tag, serializer, c.naming) }
    }

    /** One point-to-point operation of two messages (length, bytes), recorded once; see [Communicator.recvObject]. */
    final override suspend fun <T> recvObject(src: Int, tag: Int, serializer: KSerializer<T>): T {
        validator.recvObject(src, tag)
        return composite(CollectiveOp.RecvObject, peer = src, tag = tag) { c -> ObjectProtocol.recv(this, backend.objectTransport, validator, src, tag, serializer, c.naming) }
    }

    /**
     * One collective operation over the backend's [CommunicatorBackend.monitoredBarrierChannel], recorded once as
     * `monitoredBarrier` and issued in call order; see [Communicator.monitoredBarrier].
     */
    final override suspend fun monitoredBarrier(timeout: kotlin.time.Duration, waitAllRanks: Boolean) {
        val channel = backend.monitoredBarrierChannel ?: MonitoredBarrier.taggedChannel(this)
        MonitoredBarrier.checkTimeout(timeout, channel)
        composite(CollectiveOp.MonitoredBarrier) { MonitoredBarrier.run(this, channel, timeout, waitAllRanks) }
    }

    public companion object {
        /** [CommunicatorBackend.issue]'s answer when the caller must [CommunicatorBackend.await] the call. */
        @JvmField public val PENDING: Any = Any()

        /** [CommunicatorBackend.aborting]'s detail when the front aborted (a backend passes its own values to [abortWith]). */
        public const val ABORT_FROM_FRONT: Int = 0

        /** The operation named by [abort]'s exception. */
        public const val ABORT: String = "abort"

        /** Sets allToAllV's extra signature word (see [CollectiveSignature.splitsWord]) of the signature at [at] in [dst]. */
        @JvmStatic
        public fun setSplitsWord(dst: LongArray, at: Int, word: Long) {
            dst[at + 7] = word
        }

        /**
         * Sets allToAllV's extra signature word of the signature at [at] in [dst] from what every
         * peer sends this rank ([sentToMe], rows per peer) and what this rank expects ([outputSplits]).
         */
        @JvmStatic
        public fun setSplitsWord(dst: LongArray, at: Int, sentToMe: IntArray, outputSplits: List<Int>) {
            setSplitsWord(dst, at, CollectiveSignature.splitsWord(sentToMe, outputSplits))
        }
    }
}
