package dev.tpcomm.coroutines.local

import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.Communicator
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.MessageInfo
import dev.tpcomm.PointToPoint
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.spi.CollectiveOp
import dev.tpcomm.spi.CollectiveSignature
import dev.tpcomm.spi.CollectiveValidator
import dev.tpcomm.spi.CommunicationErrors
import dev.tpcomm.spi.FailureState
import dev.tpcomm.spi.MonitoredBarrier
import dev.tpcomm.spi.MonitoredBarrierChannel
import dev.tpcomm.spi.PointToPointBatch
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.TimeoutCancellationException
import kotlinx.coroutines.currentCoroutineContext
import kotlinx.coroutines.ensureActive
import kotlinx.coroutines.suspendCancellableCoroutine
import kotlin.coroutines.resume
import kotlin.time.Duration

/**
 * One rank of a [LocalGroup]: the in-process backend's [Communicator].
 *
 * A collective assigns its sequence number under [issueLock] synchronously in the call (so issue
 * order is call order, also for concurrent callers and `CoroutineStart.UNDISPATCHED`), records
 * itself in the flight recorder, writes its signature into the group's slot for that number and
 * arrives. The last arriver checks the signatures, moves the data and resumes the others. A
 * waiting rank suspends with a cancellation handler ([CancelledWait]) that aborts the world at
 * once when it is cancelled; the watchdog turns a missed deadline into an abort of the world.
 */
internal class LocalCommunicator(private val group: LocalGroup, override val rank: Int) : Communicator, dev.tpcomm.coroutines.FlightRecorded {
    val world = group.world
    override val worldSize: Int get() = group.size
    override val backendName: String get() = BACKEND
    override val device: Device get() = Device.Host

    /**
     * The core's argument checks, the same as MPI's: heap-backed tensors are refused (with MPI's
     * message) unless the world was created with `local.allowHeapMemory=true`, so what passes here
     * passes on the native backends.
     */
    private val validator = CollectiveValidator(group.size, Device.Host, nativeMemory = !world.allowHeapMemory)

    override val flightRecorder: FlightRecorder get() = recorder
    val recorder = FlightRecorder(world.config.flightRecorderSize, rank, BACKEND, worldSize = group.size, communicator = FlightRecorder.safeId(group.description.replace("local world of ", "world")), dumpDirectory = world.config.flightRecorderDir)

    /**
     * The builder of this rank's exceptions (rank, backend, operation, sequence and the flight
     * recorder's dump). The abort state itself is the world's ([LocalWorldState.failures]): an abort
     * anywhere aborts the whole tree of communicators.
     */
    val errors = CommunicationErrors(rank, BACKEND) { recorder.dumpJson() }
    val failures = FailureState(errors)
    private val issueLock = Any()
    private var collectiveSeq = 0L
    @Volatile private var closed = false

    // ---------------------------------------------------------------- lifecycle

    /** Communicators this rank obtained from split/group on this one, closed by [closeTree]. */
    private val children = java.util.concurrent.CopyOnWriteArrayList<LocalCommunicator>()

    fun markClosed() {
        closed = true
        recorder.close()
    }

    /** Closes this communicator and, first, every communicator split from it (recursively). */
    fun closeTree() {
        for (c in children) c.closeTree()
        close()
    }

    /**
     * Closes this rank. Later calls throw [CommunicatorAbortedException]. If other ranks already wait
     * for this one, the world aborts so they fail at once instead of timing out.
     */
    override fun close() {
        if (closed) return
        closed = true
        recorder.close()
        group.rankClosed(rank)
    }

    override fun toString(): String = "LocalCommunicator(rank $rank of ${group.size}, ${group.description})"

    // ---------------------------------------------------------------- exceptions

    fun abortedException(operation: String, seq: Long, cause: Throwable): CommunicatorAbortedException =
        errors.aborted(operation, seq, "the communicator was aborted: ${LocalWorldState.describe(cause)}", cause)

    fun failureException(f: SlotFailure, operation: String, seq: Long): CommunicationException = when (f.kind) {
        SlotFailure.MISMATCH -> errors.mismatch(operation, seq, f.message, f.ranks, f.fields)
        SlotFailure.TIMEOUT -> errors.timeout(operation, seq, f.message, f.cause)
        else -> errors.aborted(operation, seq, f.message, f.cause)
    }

    private fun unusable(operation: String, seq: Long): CommunicationException? {
        if (closed) {
            return errors.aborted(operation, seq, "this communicator is closed; create a new one to communicate again", world.abortCause)
        }
        world.abortCause?.let { return abortedException(operation, seq, it) }
        return null
    }

    private fun genericFailure(cause: Throwable) =
        SlotFailure(SlotFailure.ABORTED, "the communicator was aborted: ${LocalWorldState.describe(cause)}", cause)

    // ---------------------------------------------------------------- collectives

    override suspend fun allReduce(tensor: Tensor, op: ReduceOp): Tensor {
        validator.allReduce(tensor, op)
        return collective(OpKind.ALL_REDUCE, tensor, null, tensor, op, -1, 0, null, tensor)
    }

    override suspend fun broadcast(tensor: Tensor, root: Int): Tensor {
        validator.broadcast(tensor, root)
        return collective(OpKind.BROADCAST, tensor, null, tensor, null, root, 0, null, tensor)
    }

    override suspend fun reduce(tensor: Tensor, root: Int, op: ReduceOp): Tensor {
        validator.reduce(tensor, root, op)
        return collective(OpKind.REDUCE, tensor, null, tensor, op, root, 0, null, tensor)
    }

    override suspend fun allGatherInto(output: Tensor, input: Tensor, dim: Int): Tensor {
        val d = validator.allGatherInto(output, input, dim)
        return collective(OpKind.ALL_GATHER, input, output, input, null, -1, d, null, output)
    }

    override suspend fun reduceScatterInto(output: Tensor, input: Tensor, op: ReduceOp, dim: Int): Tensor {
        val d = validator.reduceScatterInto(output, input, op, dim)
        return collective(OpKind.REDUCE_SCATTER, input, output, input, op, -1, d, null, output)
    }

    override suspend fun gather(input: Tensor, root: Int, dim: Int): Tensor? {
        val d = validator.gather(input, root, dim)
        val output = if (rank == root) Tensor.zeros(input.dtype, validator.allGatherShape(input, d, "gather")) else null
        return collective(OpKind.GATHER, input, output, input, null, root, d, null, output)
    }

    override suspend fun scatter(output: Tensor, input: Tensor?, root: Int, dim: Int) {
        val d = validator.scatter(output, input, root, rank, dim)
        return collective(OpKind.SCATTER, if (rank == root) input else null, output, output, null, root, d, null, Unit)
    }

    override suspend fun allToAll(input: Tensor, dim: Int): Tensor {
        val d = validator.allToAll(input, dim)
        val output = Tensor.zeros(input.dtype, input.shape)
        return collective(OpKind.ALL_TO_ALL, input, output, input, null, -1, d, null, output)
    }

    override suspend fun allGatherVInto(output: Tensor, input: Tensor, sizes: List<Int>): Tensor {
        validator.allGatherVInto(output, input, sizes, rank)
        val extra = UnevenSizes(sizes, null, input.stride(0) * input.dtype.byteSize)
        return collective(OpKind.ALL_GATHER_V, input, output, input, null, -1, 0, extra, output)
    }

    override suspend fun reduceScatterVInto(output: Tensor, input: Tensor, sizes: List<Int>, op: ReduceOp): Tensor {
        validator.reduceScatterVInto(output, input, sizes, op, rank)
        val extra = UnevenSizes(sizes, null, input.stride(0) * input.dtype.byteSize)
        return collective(OpKind.REDUCE_SCATTER_V, input, output, input, op, -1, 0, extra, output)
    }

    /** As the interface's default, but the arguments are checked once (the output is fresh, so only the input needs it). */
    override suspend fun allToAllV(input: Tensor, inputSplits: List<Int>, outputSplits: List<Int>): Tensor {
        val output = Tensor.zeros(input.dtype, validator.allToAllVShape(input, inputSplits, outputSplits))
        val extra = UnevenSizes(inputSplits, outputSplits, input.stride(0) * input.dtype.byteSize)
        return collective(OpKind.ALL_TO_ALL_V, input, output, input, null, -1, 0, extra, output)
    }

    override suspend fun allToAllVInto(output: Tensor, input: Tensor, inputSplits: List<Int>, outputSplits: List<Int>): Tensor {
        validator.allToAllVInto(output, input, inputSplits, outputSplits)
        val extra = UnevenSizes(inputSplits, outputSplits, input.stride(0) * input.dtype.byteSize)
        return collective(OpKind.ALL_TO_ALL_V, input, output, input, null, -1, 0, extra, output)
    }

    override suspend fun barrier() {
        return collective(OpKind.BARRIER, null, null, null, null, -1, 0, null, Unit)
    }

    /** The core's [MonitoredBarrier] over [control]. */
    override suspend fun monitoredBarrier(timeout: Duration, waitAllRanks: Boolean) {
        MonitoredBarrier.run(this, control, timeout, waitAllRanks)
    }

    /**
     * The monitored barrier's messages: buffered sends into the peer's mailbox on [CONTROL_TAG],
     * which no user receive matches (user tags are >= 0 and [Mailbox] matches `ANY_TAG` to those
     * only), recorded as `monitoredBarrier`. Its abort aborts the world, with the barrier's exception
     * as the cause every later failure carries.
     */
    private val control = object : MonitoredBarrierChannel {
        override val errors: CommunicationErrors get() = this@LocalCommunicator.errors
        override val concurrentReceives: Boolean get() = true
        override val callTimeout: kotlin.time.Duration get() = group.world.config.timeout

        override suspend fun send(value: Long, dst: Int) {
            val t = Tensor.of(longArrayOf(value))
            val entry = issueP2p(MonitoredBarrier.OPERATION, t, dst, CONTROL_TAG)
            try {
                group.mailboxes[dst].deliver(rank, CONTROL_TAG, t.segment)
                entry.complete()
            } catch (e: Throwable) {
                entry.fail(e); throw e
            }
        }

        override suspend fun recv(src: Int): Long {
            val t = Tensor.zeros(DType.Int64, 1)
            val entry = issueP2p(MonitoredBarrier.OPERATION, t, src, CONTROL_TAG)
            receive(MonitoredBarrier.OPERATION, src, CONTROL_TAG, t, entry)
            return t.getLong(0)
        }

        override fun ensureUsable() {
            unusable(MonitoredBarrier.OPERATION, CommunicationErrors.NO_SEQUENCE)?.let { throw it }
        }

        override fun abort(cause: CommunicationException) {
            world.abort(cause)
        }
    }

    override suspend fun split(color: Int?, key: Int): Communicator? {
        val extra = intArrayOf(if (color == null) 0 else 1, color ?: 0, key)
        return collective<Any?>(OpKind.SPLIT, null, null, null, null, -1, 0, extra, null).let { it as LocalCommunicator? }?.also { children.add(it) }
    }

    override suspend fun group(ranks: List<Int>): Communicator? {
        validator.group(ranks)
        return collective<Any?>(OpKind.GROUP, null, null, null, null, -1, 0, ranks.toList(), null).let { it as LocalCommunicator? }?.also { children.add(it) }
    }

    /**
     * Issues, arrives at and completes one collective. [sig] is the tensor whose dtype and shape form
     * the signature. Returns the rank's result for split/group, [ret] otherwise.
     *
     * The common case of the last arriver (which never suspends) runs in the plain function
     * [issueAndArrive], so it allocates no coroutine state; only a rank that has to wait goes on to
     * the suspending [finishSlow].
     */
    private suspend fun <T> collective(
        kind: Int, input: Tensor?, output: Tensor?, sig: Tensor?, op: ReduceOp?, root: Int, dim: Int, extra: Any?, ret: T,
    ): T {
        // A coroutine already cancelled does not issue: nothing is in flight yet.
        currentCoroutineContext().ensureActive()
        // Memory lifetime (Tensor.retain): a close() while the collective is in flight only marks the
        // tensors closed; their memory is freed at the release, once this rank's slot is final (a
        // cancelled wait spins until then, see CancelledWait), so no rank's data movement touches
        // them afterwards. finishSlow releases on the slow path: keeping its call a tail call keeps
        // this function free of a coroutine state machine (no allocation on the fast path).
        val heldOutput = retain(OpKind.name(kind), input, output)
        val r = try {
            issueAndArrive(kind, input, output, sig, op, root, dim, extra, ret)
        } catch (t: Throwable) {
            release(input, output, heldOutput); throw t
        }
        if (r is Pending) return finishSlow(r, kind, input, output, sig, op, root, dim, extra, ret, heldOutput)
        release(input, output, heldOutput)
        @Suppress("UNCHECKED_CAST")
        return r as T
    }

    /** Retains [input] and [output] (see [Tensor.retain]); returns whether [output] was retained (not null, not [input]). */
    private fun retain(name: String, input: Tensor?, output: Tensor?): Boolean {
        input?.retain(name)
        if (output == null || output === input) return false
        try {
            output.retain(name)
        } catch (t: Throwable) {
            input?.release(); throw t
        }
        return true
    }

    private fun release(input: Tensor?, output: Tensor?, heldOutput: Boolean) {
        input?.release()
        if (heldOutput) output!!.release()
    }

    /** A collective issued but not finished without waiting: what [finishSlow] needs. [slot] is null when the ring slot was still busy. */
    private class Pending(val slot: OpSlot?, val seq: Long, val entry: FlightRecorder.Entry, val name: String)

    /**
     * Issues the collective (sequence number, flight recorder) and, when its ring slot is free,
     * arrives. Returns the result when this rank arrived last and the collective succeeded, a
     * [Pending] otherwise (wait, failure, or busy slot). Never suspends.
     */
    private fun issueAndArrive(
        kind: Int, input: Tensor?, output: Tensor?, sig: Tensor?, op: ReduceOp?, root: Int, dim: Int, extra: Any?, ret: Any?,
    ): Any? {
        val name = OpKind.name(kind)
        var issued: FlightRecorder.Entry? = null
        var seq = 0L
        synchronized(issueLock) {
            val e = recorder.start(name, sig?.dtype, sig?.shape, sig?.byteSize ?: 0L, root = if (root >= 0) root else FlightRecorder.NONE, reduceOp = op, dim = if (OpKind.hasDim(kind)) dim else FlightRecorder.NONE)
            unusable(name, e.sequence)?.let { e.fail(it); throw it }
            if (group.anyClosed) {
                val ex = errors.aborted(
                    name, e.sequence,
                    "rank ${group.firstClosedRank} of ${group.description} closed its communicator; collectives on it can no longer complete",
                )
                e.fail(ex); throw ex
            }
            seq = ++collectiveSeq
            issued = e
        }
        val entry = issued!!
        val slot = group.slotFor(seq) ?: return Pending(null, seq, entry, name)
        if (!arrive(slot, seq, kind, input, output, sig, op, root, dim, extra, entry)) return Pending(slot, seq, entry, name)
        if (slot.state.get() != OpSlot.DONE) return Pending(slot, seq, entry, name) // failed: thrown by finishSlow
        val result = slot.results[rank]
        slot.depart()
        entry.complete()
        return result ?: ret
    }

    /**
     * Writes this rank's arguments into [slot] and arrives. The last arriver runs the collective and
     * returns true once the slot is final; the others return false (they must wait).
     */
    private fun arrive(
        slot: OpSlot, seq: Long, kind: Int, input: Tensor?, output: Tensor?, sig: Tensor?, op: ReduceOp?, root: Int, dim: Int, extra: Any?,
        entry: FlightRecorder.Entry,
    ): Boolean {
        val r = rank
        slot.kinds[r] = kind
        slot.ops[r] = op
        slot.roots[r] = root
        slot.dims[r] = dim
        slot.extras[r] = extra
        val op0 = CollectiveOp.entries[kind]
        if (op0.isUneven) {
            encodeUneven(slot, r, op0, sig!!, output!!, op, extra as UnevenSizes)
        } else {
            CollectiveSignature.encode(
                slot.signatures, r * CollectiveSignature.SIZE, op0, sig, op,
                root = if (op0.hasRoot) root else -1,
                dim = if (op0.hasDim) dim else -1,
                extra = if (op0 == CollectiveOp.Group) extra.hashCode().toLong() else 0L,
            )
        }
        slot.inputs[r] = input
        slot.outputs[r] = output
        slot.recorderSeqs[r] = entry.sequence
        slot.present[r] = true
        if (slot.firstArrivalNanos == 0L) slot.firstArrivalNanos = System.nanoTime()
        if (slot.arrived.incrementAndGet() == group.size) {
            runAsLast(slot, seq)
            // An abort may be failing the slot concurrently: wait the few instructions until it is final.
            while (!slot.isFinal) Thread.onSpinWait()
            return true
        }
        world.abortCause?.let { slot.fail(genericFailure(it)) }
        return false
    }

    /** The rest of [collective] after [issueAndArrive] returned [p]: waits for a busy slot, arrives, waits, finishes or throws. */
    private suspend fun <T> finishSlow(
        p: Pending, kind: Int, input: Tensor?, output: Tensor?, sig: Tensor?, op: ReduceOp?, root: Int, dim: Int, extra: Any?, ret: T,
        heldOutput: Boolean,
    ): T = try {
        finishSlowHeld(p, kind, input, output, sig, op, root, dim, extra, ret)
    } finally {
        release(input, output, heldOutput)
    }

    private suspend fun <T> finishSlowHeld(
        p: Pending, kind: Int, input: Tensor?, output: Tensor?, sig: Tensor?, op: ReduceOp?, root: Int, dim: Int, extra: Any?, ret: T,
    ): T {
        val entry = p.entry
        var slot = p.slot
        if (slot == null) {
            slot = awaitSlot(p.seq, p.name, entry)
            if (!arrive(slot, p.seq, kind, input, output, sig, op, root, dim, extra, entry)) await(slot, entry)
        } else if (!slot.isFinal) {
            await(slot, entry)
        }
        if (slot.state.get() == OpSlot.DONE) {
            val result = slot.results[rank]
            slot.depart()
            entry.complete()
            @Suppress("UNCHECKED_CAST")
            return (result ?: ret) as T
        }
        val f = slot.failure!!
        slot.depart()
        val ex = failureException(f, p.name, entry.sequence)
        entry.fail(ex)
        throw ex
    }

    /**
     * The signature of an uneven collective: shapes that are the same on every rank (allGatherV's
     * output, reduceScatterV's input, allToAllV's row with dim 0 as -1) and the sizes' digest; for
     * allToAllV the extra word is set by [checkSplits] once every rank arrived.
     */
    private fun encodeUneven(slot: OpSlot, r: Int, op0: CollectiveOp, input: Tensor, output: Tensor, op: ReduceOp?, sizes: UnevenSizes) {
        val at = r * CollectiveSignature.SIZE
        when (op0) {
            CollectiveOp.AllGatherV -> CollectiveSignature.encodeShape(
                slot.signatures, at, op0, input.dtype, output.shape, extra = CollectiveSignature.sizesDigest(sizes.sizes.asList()),
            )
            CollectiveOp.ReduceScatterV -> CollectiveSignature.encodeShape(
                slot.signatures, at, op0, input.dtype, input.shape, op, extra = CollectiveSignature.sizesDigest(sizes.sizes.asList()),
            )
            else -> {
                // The row's shape: dim 0 (word 8) is each rank's own, so it is encoded as -1.
                CollectiveSignature.encode(slot.signatures, at, op0, input)
                slot.signatures[at + 8] = -1L
            }
        }
    }

    /**
     * allToAllV: every rank's extra signature word ([CollectiveSignature.splitsWord]) from the splits
     * all ranks left in the slot: 0 when what rank r expects from each peer is what the peer sends.
     */
    private fun checkSplits(slot: OpSlot, w: Int) {
        for (r in 0 until w) {
            if (slot.kinds[r] != OpKind.ALL_TO_ALL_V) continue
            val mine = slot.extras[r] as UnevenSizes
            var word = 0L
            for (j in 0 until w) {
                val peer = slot.extras[j] as? UnevenSizes ?: continue
                if (slot.kinds[j] != OpKind.ALL_TO_ALL_V) continue
                if (peer.sizes[r] != mine.outSizes!![j]) { word = (j + 1).toLong(); break }
            }
            slot.signatures[r * CollectiveSignature.SIZE + 7] = word
        }
    }

    private fun runAsLast(slot: OpSlot, seq: Long) {
        if (slot.kinds[rank] == OpKind.ALL_TO_ALL_V) checkSplits(slot, group.size)
        val mismatch = CollectiveSignature.compare(slot.signatures, group.size, seq, group.description)
        if (mismatch != null) {
            val f = SlotFailure(SlotFailure.MISMATCH, mismatch.message, null, mismatch.ranks, mismatch.fields)
            if (slot.fail(f)) {
                world.abort(errors.mismatch(OpKind.name(slot.kinds[rank]), slot.recorderSeqs[rank], mismatch.message, mismatch.ranks, mismatch.fields))
            }
            return
        }
        if (!slot.state.compareAndSet(OpSlot.PENDING, OpSlot.RUNNING)) return // failed by an abort meanwhile
        try {
            CollectiveExecution.execute(slot, group.size, group)
        } catch (t: Throwable) {
            // The data movement itself failed (e.g. a tensor was closed while in flight).
            val msg = "the data movement of ${OpKind.name(slot.kinds[rank])} failed: $t"
            slot.failRunning(SlotFailure(SlotFailure.ABORTED, msg, t))
            world.abort(errors.aborted(OpKind.name(slot.kinds[rank]), slot.recorderSeqs[rank], msg, t))
            return
        }
        slot.complete(rank)
    }

    /**
     * Waits for the slot of [seq] to be free when this rank ran more than the ring size ahead: woken
     * when the slot is recycled (the last rank departs the operation a ring earlier) or the world aborts.
     */
    private suspend fun awaitSlot(seq: Long, name: String, entry: FlightRecorder.Entry): OpSlot {
        try {
            while (true) {
                group.slotFor(seq)?.let { return it }
                world.abortCause?.let {
                    val e = abortedException(name, entry.sequence, it)
                    entry.fail(e); throw e
                }
                group.awaitSlotFor(seq)
            }
        } catch (c: CancellationException) {
            // The sequence number is taken: without this rank the others could never complete it.
            val reason = cancellationReason(name, entry.sequence, c, "while waiting to issue it")
            world.abort(reason)
            entry.fail(reason)
            if (reason is CommunicationTimeoutException && world.abortCause === reason) throw reason
            throw c
        }
    }

    /**
     * Why the world aborts when this rank is cancelled inside [name]: a [CommunicationTimeoutException]
     * when the cancellation is a caller's deadline (`withTimeout`), a [CommunicatorAbortedException] otherwise.
     */
    fun cancellationReason(name: String, seq: Long, cause: Throwable?, where: String): CommunicationException =
        if (cause is TimeoutCancellationException) {
            errors.timeout(
                name, seq, "$name did not complete before the caller's deadline (${cause.message}); cancelled $where, which aborts the communicator", cause,
            )
        } else {
            errors.aborted(name, seq, "rank $rank was cancelled $where in $name; the collective cannot complete without it", cause)
        }

    /**
     * The cancellation handler of one wait of this rank in [slot]: it runs in the canceller's thread,
     * inside its `cancel()`. A collective still pending is failed at once by aborting the world (so its
     * data movement never starts and the peers get a named exception); one whose data movement already
     * runs is waited for, so that no tensor of the cancelled rank is written after `cancel()` returns.
     */
    class CancelledWait(private val comm: LocalCommunicator, private val slot: OpSlot) : (Throwable?) -> Unit {
        /** The abort this cancellation caused, if it was the first (reset before each wait). */
        @Volatile @JvmField var reason: CommunicationException? = null

        override fun invoke(cause: Throwable?) {
            if (slot.state.get() == OpSlot.PENDING) {
                val r = comm.rank
                val reason = comm.cancellationReason(OpKind.name(slot.kinds[r]), slot.recorderSeqs[r], cause, "while waiting")
                if (comm.world.abort(reason)) this.reason = reason
            }
            while (!slot.isFinal) Thread.onSpinWait()
        }
    }

    /**
     * Waits until [slot] is final. Cancellation of the waiting coroutine is handled at once by a
     * [CancelledWait] (see there). Returns normally when the slot is final for another reason (done,
     * or failed by a failure elsewhere: the caller throws that named failure); throws when this
     * rank's cancellation failed it: the [CommunicationTimeoutException] of a caller's deadline, or
     * the [CancellationException].
     */
    @Suppress("NOTHING_TO_INLINE")
    private suspend inline fun await(slot: OpSlot, entry: FlightRecorder.Entry) {
        var spins = SPIN
        while (!slot.isFinal) {
            if (spins-- > 0) { Thread.onSpinWait(); continue }
            // One handler per rank and ring slot, reused by every generation: nothing allocated per wait.
            val handler = slot.cancelHandlers[rank] ?: CancelledWait(this, slot).also { slot.cancelHandlers[rank] = it }
            handler.reason = null
            try {
                suspendCancellableCoroutine<Unit> { cont ->
                    cont.invokeOnCancellation(handler)
                    if (!slot.waiters.compareAndSet(rank, null, cont)) cont.resume(Unit)
                }
            } catch (c: CancellationException) {
                while (!slot.isFinal) Thread.onSpinWait()
                if (slot.state.get() == OpSlot.DONE) return // completed before the cancellation could stop it
                val own = handler.reason ?: return // failed by a failure elsewhere: the caller throws it
                slot.depart()
                entry.fail(own)
                if (own is CommunicationTimeoutException) throw own
                throw c
            }
            if (!slot.isFinal) {
                // Woken without a result: only possible in an aborted world (a stale wake-up).
                val cause = world.abortCause
                if (cause != null) slot.fail(genericFailure(cause)) else Thread.yield()
            }
        }
    }

    // ---------------------------------------------------------------- point to point

    override suspend fun send(tensor: Tensor, dst: Int, tag: Int) {
        validator.send(tensor, dst, tag)
        val entry = issueP2p("send", tensor, dst, tag)
        try {
            tensor.retain("send")
            try {
                val box = group.mailboxes[dst]
                // A send to this rank is buffered at any size, as the MPI backend's is (docs/mpi.md):
                // send-then-receive to self works there, so it must here.
                if (tensor.byteSize <= world.eagerLimit || dst == rank) {
                    box.deliver(rank, tag, tensor.segment)
                } else {
                    rendezvous(box, tensor, dst, tag, entry)
                }
            } finally {
                tensor.release()
            }
            entry.complete()
        } catch (t: Throwable) {
            entry.fail(t); throw t
        }
    }

    /** A send above the eager limit: returns once a receive on [dst] has copied [tensor] (see [Mailbox.park]). */
    private suspend fun rendezvous(box: Mailbox, tensor: Tensor, dst: Int, tag: Int, entry: FlightRecorder.Entry) {
        if (group.communicators[dst].closed) {
            throw errors.aborted("send", entry.sequence, "rank $dst closed its communicator; a send above the eager limit needs its receive")
        }
        try {
            suspendCancellableCoroutine<Unit> { cont -> box.park(rank, tag, tensor.segment, cont, "send", entry.sequence) }
        } catch (c: TimeoutCancellationException) {
            box.quiesce() // a receive copying from the tensor finishes before the caller's release
            throw errors.timeout(
                "send", entry.sequence,
                "send to rank $dst (tag $tag) did not complete before the caller's deadline (${c.message}): no matching receive was posted. " +
                    box.rendezvousAdvice(tensor.byteSize, dst) + " The send was withdrawn; rank $dst will not receive it, and the communicator stays usable",
                c,
            )
        } catch (t: Throwable) {
            box.quiesce()
            throw t
        }
    }

    override suspend fun recv(tensor: Tensor, src: Int, tag: Int): MessageInfo {
        validator.recv(tensor, src, tag)
        val entry = issueP2p("recv", tensor, src, tag)
        return receive("recv", src, tag, tensor, entry)
    }

    /** Every element checked first, then issued at once as its own [send] or [recv] ([PointToPointBatch]). */
    override suspend fun sendRecv(ops: List<PointToPoint>): List<MessageInfo> {
        validator.sendRecv(ops)
        return PointToPointBatch.run(this, ops)
    }

    override suspend fun probe(src: Int, tag: Int): MessageInfo {
        validator.probe(src, tag)
        val entry = issueP2p("probe", null, src, tag)
        return receive("probe", src, tag, null, entry)
    }

    private fun issueP2p(name: String, tensor: Tensor?, peer: Int, tag: Int): FlightRecorder.Entry {
        val entry = recorder.start(name, tensor?.dtype, tensor?.shape, tensor?.byteSize ?: 0L, peer = peer, tag = tag)
        unusable(name, entry.sequence)?.let { entry.fail(it); throw it }
        return entry
    }

    private suspend fun receive(name: String, src: Int, tag: Int, target: Tensor?, entry: FlightRecorder.Entry): MessageInfo {
        val box = group.mailboxes[rank]
        // A receive buffer closed while the receive is posted stays allocated until it completes or
        // is withdrawn (the sender copies into it under the mailbox's lock).
        target?.retain(name)
        try {
            box.tryTake(src, tag, target, name)?.let { entry.complete(); return it }
            if (src != Communicator.ANY_SOURCE && group.communicators[src].closed) {
                throw errors.aborted(name, entry.sequence, "rank $src closed its communicator and no matching message from it is queued")
            }
            val info = suspendCancellableCoroutine { cont -> box.postOrTake(src, tag, target, name, entry.sequence, cont) }
            entry.complete()
            return info
        } catch (c: TimeoutCancellationException) {
            box.quiesce()
            // The caller's deadline (withTimeout): a cancelled receive is withdrawn and never consumes
            // or writes a message (Mailbox.deliver skips it), so nothing needs aborting here.
            val x = errors.timeout(
                name, entry.sequence,
                "$name from ${peerName(src)} (tag ${tagName(tag)}) did not complete before the caller's deadline (${c.message}); " +
                    "the receive was withdrawn without consuming a message, and the communicator stays usable", c,
            )
            entry.fail(x); throw x
        } catch (t: Throwable) {
            box.quiesce() // before the release below frees a buffer closed meanwhile
            entry.fail(t); throw t
        } finally {
            target?.release()
        }
    }

    private fun peerName(src: Int): String = if (src == Communicator.ANY_SOURCE) "any rank" else "rank $src"

    private fun tagName(tag: Int): String = if (tag == Communicator.ANY_TAG) "any" else tag.toString()

    companion object {
        const val BACKEND = "local"

        /** The tag of the monitored barrier's messages: negative, so no user receive (tags >= 0, or `ANY_TAG`) matches it. */
        const val CONTROL_TAG = -2

        /** Busy-wait iterations before a waiting rank suspends. `-Dtpcomm.local.spin=N` overrides. */
        private val SPIN: Int = Integer.getInteger("tpcomm.local.spin", 0)
    }
}
