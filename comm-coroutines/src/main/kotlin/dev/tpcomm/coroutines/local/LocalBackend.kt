package dev.tpcomm.coroutines.local

import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.Communicator
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.MessageInfo
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.engine.CommunicatorBackend
import dev.tpcomm.engine.CommunicatorFront
import dev.tpcomm.engine.DeadlineWatchdog
import dev.tpcomm.engine.OperationCall
import dev.tpcomm.engine.OperationFailedSignal
import dev.tpcomm.engine.OperationFailure
import dev.tpcomm.spi.CollectiveSignature
import dev.tpcomm.spi.CollectiveValidator
import dev.tpcomm.spi.CommunicationErrors
import dev.tpcomm.spi.MonitoredBarrier
import dev.tpcomm.spi.MonitoredBarrierChannel
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.TimeoutCancellationException
import kotlinx.coroutines.suspendCancellableCoroutine
import kotlin.coroutines.resume
import kotlin.time.Duration

/**
 * One rank of a [LocalGroup]: the in-process backend composed into that rank's [CommunicatorFront].
 *
 * The front validates, takes the sequence number, records and retains; [issue] then writes this
 * rank's arguments and signature into the group's slot for that number and arrives. The last
 * arriver compares the signatures, moves the data and resumes the others. A waiting rank suspends
 * ([await]) with a cancellation handler ([CancelledWait]) that aborts the group at once when it is
 * cancelled; a missed deadline (the front's, from the call) aborts the group ([deadlinePassed]).
 * Every failure aborts this communicator's [LocalGroup] only: the communicator it was split from,
 * its siblings and those split from it stay usable, as on MPI and NCCL.
 */
internal class LocalBackend(val group: LocalGroup, val rank: Int) : CommunicatorBackend() {
    val world = group.world

    /** This rank's communicator: the front this backend is composed into. */
    fun compose(): CommunicatorFront = CommunicatorFront(
        rank, group.size, Device.Host, BACKEND,
        FlightRecorder(
            group.world.config.flightRecorderSize, rank, BACKEND, worldSize = group.size,
            communicator = FlightRecorder.safeId(group.description.replace("local world of ", "world")), dumpDirectory = group.world.config.flightRecorderDir,
            // No clock read per call unless local.timing asks for one (LocalBackendFactory.TIMING_OPTION), as on MPI.
            timing = world.timing,
            clock = if (world.timing) FlightRecorder.NanoClock.SYSTEM else DeadlineWatchdog.coarseClock,
        ),
        // The core's argument checks, the same as MPI's: heap-backed tensors are refused (with MPI's
        // message) unless the world was created with `local.allowHeapMemory=true`, so what passes here
        // passes on the native backends.
        CollectiveValidator(group.size, Device.Host, nativeMemory = !group.world.allowHeapMemory),
        group.world.config.timeout,
        // The signatures meet in the slot with the data: compared always, at no cost.
        dev.tpcomm.engine.SignatureCheck.Always, group.world.config.checkConsistency,
        // split and group: the creation's deadline, not an operation's.
        group.world.config.effectiveCreationTimeout,
        this,
    )

    // ---------------------------------------------------------------- lifecycle

    /** Communicators this rank obtained from split/group on this one, closed by [closeTree]. */
    private val children = java.util.concurrent.CopyOnWriteArrayList<LocalBackend>()

    override fun adopted(child: Communicator) {
        children.add((child as CommunicatorFront).backend as LocalBackend)
    }

    /** Closes this communicator and, first, every communicator split from it (recursively). */
    fun closeTree() {
        for (c in children) c.closeTree()
        front.close()
    }

    /**
     * The local part of the front's close: if other ranks already wait for this one, the group
     * aborts so they fail at once instead of timing out (not when the whole group closes).
     */
    override fun shutdown() {
        if (!group.closingAll) group.rankClosed(rank)
    }

    override fun toString(): String = "LocalBackend(rank $rank of ${group.size}, ${group.description})"

    // ---------------------------------------------------------------- failures

    /** The failure of a call ended because the group was aborted by [cause] (the front's wording). */
    fun abortedBy(cause: Throwable): OperationFailure = front.abortedFailure(cause)

    /** The abort of the group when this rank's close leaves others unable to finish ([message] says why). */
    fun closeFailure(message: String): CommunicationException =
        front.exceptionOf(OperationFailure(OperationFailure.ABORTED, message), CommunicationErrors.CLOSE, CommunicationErrors.NO_SEQUENCE)

    /**
     * The front's failure is this rank's; the group's abort reaches every rank's front. Until it has
     * (an abort racing with this call), the slot the call meets fails it ([issue]).
     */
    override fun refusal(operation: String, collective: Boolean): OperationFailure? {
        if (collective && group.anyClosed) {
            return OperationFailure(
                OperationFailure.ABORTED,
                "rank ${group.firstClosedRank} of ${group.description} closed its communicator; collectives on it can no longer complete",
            )
        }
        return null
    }

    /**
     * The front aborted this rank's communicator (a numbered call given up, a caller's cancellation,
     * [abort]): the group aborts, so every rank's calls in flight end at once. An abort that came
     * from the group ([FROM_GROUP]) has nothing left to do.
     */
    override fun aborting(cause: Throwable, detail: Int) {
        if (detail != FROM_GROUP) group.abort(cause)
    }

    /**
     * The front's deadline: a collective names the ranks that never arrived, a point-to-point call
     * what it waited for ([LocalGroup.collectiveTimedOut], [LocalGroup.pointToPointTimedOut]); either
     * aborts the group, so every waiting rank ends with the same [CommunicationTimeoutException].
     */
    override fun deadlinePassed(entry: FlightRecorder.Entry, call: OperationCall?) {
        if (call != null) {
            group.collectiveTimedOut(rank, call.sequence, entry.sequence, call.name, call.state as OpSlot?)
        } else {
            group.pointToPointTimedOut(rank, entry.sequence)
        }
    }

    // ---------------------------------------------------------------- collectives

    /** The front's [monitoredBarrier] runs the core's [MonitoredBarrier] over [control]. */
    override val monitoredBarrierChannel: MonitoredBarrierChannel get() = control

    /** `CommConfig.reproducibleReductions`: the front's default for floating-point sums (docs/reproducible.md). */
    override val reproducibleReductions: Boolean get() = group.world.config.reproducibleReductions

    /** Reproducible `Sum` and `Avg` all-reduces and reduces are one slot operation summed exactly from every rank's input ([CollectiveExecution]). */
    override fun reducesExactly(tensor: Tensor, gathers: Boolean): Boolean = true

    /**
     * The monitored barrier's messages: buffered sends into the peer's mailbox on [CONTROL_TAG],
     * which no user receive matches (user tags are >= 0 and [Mailbox] matches `ANY_TAG` to those
     * only), recorded as `monitoredBarrier`. Its abort aborts the group, with the barrier's exception
     * as the cause every later failure carries.
     */
    private val control = object : MonitoredBarrierChannel {
        override val errors: CommunicationErrors get() = front.errors
        override val concurrentReceives: Boolean get() = true
        override val callTimeout: kotlin.time.Duration get() = group.world.config.timeout

        override suspend fun send(value: Long, dst: Int) {
            val t = Tensor.of(longArrayOf(value))
            val entry = front.beginPointToPoint(MonitoredBarrier.OPERATION, t, dst, CONTROL_TAG)
            front.recorded(entry) { group.mailboxes[dst].deliver(rank, CONTROL_TAG, t.segment) }
        }

        override suspend fun recv(src: Int): Long {
            val t = Tensor.zeros(DType.Int64, 1)
            val entry = front.beginPointToPoint(MonitoredBarrier.OPERATION, t, src, CONTROL_TAG)
            front.recorded(entry) { receive(MonitoredBarrier.OPERATION, src, CONTROL_TAG, t, entry) }
            return t.getLong(0)
        }

        override fun ensureUsable() {
            refusal(MonitoredBarrier.OPERATION, collective = false)?.let { throw front.exceptionOf(it, MonitoredBarrier.OPERATION, CommunicationErrors.NO_SEQUENCE) }
        }

        override fun abort(cause: CommunicationException) {
            group.abort(cause)
        }
    }

    /**
     * Arrives at the call's slot when it is free. Returns the result when this rank arrived last and
     * the collective succeeded, [CommunicatorFront.PENDING] otherwise (wait, failure, or busy slot).
     * Never suspends; allocates nothing when it completes.
     */
    override fun issue(call: OperationCall): Any? {
        val slot = group.slotFor(call.sequence)
        // What await needs: the slot, or none when the ring slot was still busy (state stays null).
        if (slot == null) return CommunicatorFront.PENDING
        call.state = slot
        if (!arrive(slot, call)) return CommunicatorFront.PENDING
        if (slot.state.get() != OpSlot.DONE) return CommunicatorFront.PENDING // failed: thrown by await
        val result = slot.results[rank]
        slot.depart()
        return result
    }

    /**
     * Writes this rank's arguments and signature into [slot] and arrives. The last arriver runs the
     * collective and returns true once the slot is final; the others return false (they must wait).
     */
    private fun arrive(slot: OpSlot, call: OperationCall): Boolean {
        val r = rank
        val kind = call.op.ordinal
        slot.kinds[r] = kind
        slot.ops[r] = call.reduceOp
        slot.roots[r] = call.root
        slot.dims[r] = call.dim
        slot.extras[r] = when {
            call.op.isUneven -> UnevenSizes(call.sizes!!, call.outputSizes, call.input!!.stride(0) * call.input.dtype.byteSize)
            else -> call.extra
        }
        call.encodeSignature(slot.signatures, r * CollectiveSignature.SIZE)
        slot.inputs[r] = call.input
        slot.outputs[r] = call.output
        slot.recorderSeqs[r] = call.entry.sequence
        slot.present[r] = true
        if (slot.arrived.incrementAndGet() == group.size) {
            runAsLast(slot, call.sequence)
            // An abort may be failing the slot concurrently: wait the few instructions until it is final.
            while (!slot.isFinal) Thread.onSpinWait()
            return true
        }
        group.abortCause?.let { slot.fail(abortedBy(it)) }
        return false
    }

    /** The rest of a collective [issue] left pending: waits for a busy slot, arrives, waits, finishes or throws. */
    override suspend fun await(call: OperationCall): Any? {
        val entry = call.entry
        var slot = call.state as OpSlot?
        if (slot == null) {
            slot = awaitSlot(call)
            call.state = slot // what the deadline reads
            if (!arrive(slot, call)) await(slot, entry)
        } else if (!slot.isFinal) {
            await(slot, entry)
        }
        if (slot.state.get() == OpSlot.DONE) {
            val result = slot.results[rank]
            slot.depart()
            return result
        }
        val f = slot.failure!!
        slot.depart()
        throw OperationFailedSignal(f)
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
            CommunicatorFront.setSplitsWord(slot.signatures, r * CollectiveSignature.SIZE, word)
        }
    }

    private fun runAsLast(slot: OpSlot, seq: Long) {
        if (slot.kinds[rank] == OpKind.ALL_TO_ALL_V) checkSplits(slot, group.size)
        val mismatch = front.compareSignatures(slot.signatures, seq, group.description)
        if (mismatch != null) {
            if (slot.fail(mismatch)) group.abort(front.exceptionOf(mismatch, OpKind.name(slot.kinds[rank]), slot.recorderSeqs[rank]))
            return
        }
        if (!slot.state.compareAndSet(OpSlot.PENDING, OpSlot.RUNNING)) return // failed by an abort meanwhile
        try {
            CollectiveExecution.execute(slot, group.size, group)
        } catch (t: Throwable) {
            // The data movement itself failed (e.g. a tensor was closed while in flight).
            val msg = "the data movement of ${OpKind.name(slot.kinds[rank])} failed: $t"
            val f = OperationFailure(OperationFailure.ABORTED, msg, t)
            slot.failRunning(f)
            group.abort(front.exceptionOf(f, OpKind.name(slot.kinds[rank]), slot.recorderSeqs[rank]))
            return
        }
        slot.complete(rank)
    }

    /**
     * Waits for the slot of [seq] to be free when this rank ran more than the ring size ahead: woken
     * when the slot is recycled (the last rank departs the operation a ring earlier) or the group aborts.
     */
    private suspend fun awaitSlot(call: OperationCall): OpSlot {
        try {
            while (true) {
                group.slotFor(call.sequence)?.let { return it }
                group.abortCause?.let { throw OperationFailedSignal(abortedBy(it)) }
                group.awaitSlotFor(call.sequence)
            }
        } catch (c: CancellationException) {
            // The sequence number is taken: without this rank the others could never complete it
            // (the front's rule; a caller's deadline becomes its named timeout in the front).
            front.abortNotIssued(call.entry.operation, call.entry.sequence, c)
            throw c
        }
    }

    /**
     * The cancellation handler of one wait of this rank in [slot]: it runs in the canceller's thread,
     * inside its `cancel()`. A collective still pending is failed at once by aborting the group (so its
     * data movement never starts and the peers get a named exception); one whose data movement already
     * runs is waited for, so that no tensor of the cancelled rank is written after `cancel()` returns.
     */
    class CancelledWait(private val comm: LocalBackend, private val slot: OpSlot) : (Throwable?) -> Unit {
        /** The abort this cancellation caused, if it was the first (reset before each wait). */
        @Volatile @JvmField var reason: CommunicationException? = null

        override fun invoke(cause: Throwable?) {
            if (slot.state.get() == OpSlot.PENDING) {
                val r = comm.rank
                val reason = comm.front.cancellationReason(OpKind.name(slot.kinds[r]), slot.recorderSeqs[r], cause, "while waiting")
                if (comm.group.abort(reason)) this.reason = reason
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
                handler.reason ?: return // failed by a failure elsewhere: the caller throws it
                slot.depart()
                throw c // the front tells a caller whose own deadline aborted the communicator its named timeout
            }
            if (!slot.isFinal) {
                // Woken without a result: only possible in an aborted group (a stale wake-up).
                val cause = group.abortCause
                if (cause != null) slot.fail(abortedBy(cause)) else Thread.yield()
            }
        }
    }

    // ---------------------------------------------------------------- point to point

    override suspend fun issueSend(entry: FlightRecorder.Entry, tensor: Tensor, dst: Int, tag: Int) {
        val box = group.mailboxes[dst]
        // A send to this rank is buffered at any size, as the MPI backend's is (docs/mpi.md):
        // send-then-receive to self works there, so it must here.
        if (tensor.byteSize <= world.eagerLimit || dst == rank) {
            box.deliver(rank, tag, tensor.segment)
        } else {
            rendezvous(box, tensor, dst, tag, entry)
        }
    }

    /** A send above the eager limit: returns once a receive on [dst] has copied [tensor] (see [Mailbox.park]). */
    private suspend fun rendezvous(box: Mailbox, tensor: Tensor, dst: Int, tag: Int, entry: FlightRecorder.Entry) {
        if (group.communicators[dst].isClosed) {
            throw OperationFailedSignal(OperationFailure(OperationFailure.ABORTED, "rank $dst closed its communicator; a send above the eager limit needs its receive"))
        }
        try {
            suspendCancellableCoroutine<Unit> { cont -> box.park(rank, tag, tensor.segment, cont, "send", entry.sequence) }
        } catch (c: TimeoutCancellationException) {
            box.quiesce() // a receive copying from the tensor finishes before the caller's release
            throw OperationFailedSignal(
                OperationFailure(
                    OperationFailure.TIMEOUT,
                    "send to rank $dst (tag $tag) did not complete before the caller's deadline (${c.message}): no matching receive was posted. " +
                        box.rendezvousAdvice(tensor.byteSize, dst) + " The send was withdrawn; rank $dst will not receive it, and the communicator stays usable",
                    c,
                ),
            )
        } catch (t: Throwable) {
            box.quiesce()
            throw t
        }
    }

    override suspend fun issueRecv(entry: FlightRecorder.Entry, tensor: Tensor, src: Int, tag: Int): MessageInfo =
        receive("recv", src, tag, tensor, entry)

    override suspend fun issueProbe(entry: FlightRecorder.Entry, src: Int, tag: Int): MessageInfo =
        receive("probe", src, tag, null, entry)

    /**
     * Takes a matching message from this rank's mailbox into [target] (a probe: none), or waits for
     * one. [target], if any, is retained by the caller: the sender copies into it under the
     * mailbox's lock, and a failed or withdrawn receive quiesces the mailbox before it returns.
     */
    private suspend fun receive(name: String, src: Int, tag: Int, target: Tensor?, entry: FlightRecorder.Entry): MessageInfo {
        val box = group.mailboxes[rank]
        try {
            box.tryTake(src, tag, target, name)?.let { return it }
            if (src != Communicator.ANY_SOURCE && group.communicators[src].isClosed) {
                throw OperationFailedSignal(OperationFailure(OperationFailure.ABORTED, "rank $src closed its communicator and no matching message from it is queued"))
            }
            return suspendCancellableCoroutine { cont -> box.postOrTake(src, tag, target, name, entry.sequence, cont) }
        } catch (c: TimeoutCancellationException) {
            box.quiesce()
            // The caller's deadline (withTimeout): a cancelled receive is withdrawn and never consumes
            // or writes a message (Mailbox.deliver skips it), so nothing needs aborting here.
            throw OperationFailedSignal(
                OperationFailure(
                    OperationFailure.TIMEOUT,
                    "$name from ${peerName(src)} (tag ${tagName(tag)}) did not complete before the caller's deadline (${c.message}); " +
                        "the receive was withdrawn without consuming a message, and the communicator stays usable",
                    c,
                ),
            )
        } catch (t: Throwable) {
            box.quiesce() // before the caller's release frees a buffer closed meanwhile
            throw t
        }
    }

    /** How messages name [src]: "rank N", or "any rank" for `ANY_SOURCE`. */
    fun peerName(src: Int): String = if (src == Communicator.ANY_SOURCE) "any rank" else "rank $src"

    private fun tagName(tag: Int): String = if (tag == Communicator.ANY_TAG) "any" else tag.toString()

    companion object {
        const val BACKEND = "local"

        /** The tag of the monitored barrier's messages: negative, so no user receive (tags >= 0, or `ANY_TAG`) matches it. */
        const val CONTROL_TAG = -2

        /** [aborting]'s detail when the group's abort reached this rank's front ([LocalGroup.abort]). */
        const val FROM_GROUP = 1

        /** Busy-wait iterations before a waiting rank suspends. `-Dtpcomm.local.spin=N` overrides. */
        private val SPIN: Int = Integer.getInteger("tpcomm.local.spin", 0)
    }
}
