package dev.tpcomm.gpu

import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.engine.Backoff
import dev.tpcomm.engine.NativeDispatcher
import dev.tpcomm.engine.NativeRequest
import dev.tpcomm.engine.OperationCall
import dev.tpcomm.engine.OperationFailedSignal
import dev.tpcomm.engine.OperationFailure
import dev.tpcomm.spi.CollectiveOp
import dev.tpcomm.spi.CollectiveSignature
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Job
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.TimeoutCancellationException
import kotlinx.coroutines.currentCoroutineContext
import kotlinx.coroutines.launch
import java.util.concurrent.ConcurrentLinkedQueue

/**
 * The operation engine of one [NcclCommunicator]: queues each operation ([NcclOp]) on the device's
 * native thread in the device's issue order ([start]), runs its native part there ([onNative]:
 * producer ordering, checkConsistency, the library calls, completion, stream-ordered frees), hands
 * its result to the caller ([finish]), reserves the output of an allocating collective before its
 * call ([allocate], [issue]), and ends operations at their deadline ([deadlinePassed]) or when their
 * caller gave up ([notIssued], [abortNotIssued]).
 *
 * Role: the queue and its lifecycle rules only; what each operation issues is its native part (see
 * `nativePart`), failures are named by [NcclOpContext.failures] and abort through
 * [NcclOpContext.handle]; what only the front knows comes through [Front]. It never calls into the
 * communicator. Thread-safety: [start], [finish], [allocate], [issue], [notIssued],
 * [deadlinePassed] and [abortNotIssued] from any thread; the in-flight count on the native thread
 * only. Lifetime: created and owned by [NcclCommunicator], one per communicator, as long as it.
 */
internal class NcclOperationQueue(
    /** What the communicator's operations issue with. */
    private val ctx: NcclOpContext,
    /** The communicator's point-to-point window (an open group on the device's thread). */
    private val p2p: PointToPointWindow,
    /** The communicator's device (its outputs are wrapped as tensors of it). */
    private val device: Device,
    /** [device]'s index (its outputs are freed with it current). */
    private val deviceIndex: Int,
    /** Whether collectives compare the ranks' signatures first (checkConsistency set to true, more than one rank). */
    private val checkConsistency: Boolean,
    /** The front the engine is composed into: its failure state, deadlines' action, signatures and the rule for calls never issued. */
    private val front: dev.tpcomm.engine.CommunicatorFront,
) {
    private val runtime: DeviceRuntime get() = ctx.runtime
    private val thread: DeviceThread get() = ctx.thread
    private val stream: Long get() = ctx.stream
    private val handle: NcclCommHandle get() = ctx.handle
    private val failures: NcclFailures get() = ctx.failures
    private val dispatcher: NativeDispatcher = ctx.thread.dispatcher

    /** Runs each operation's native part on the device's thread; a failure is delivered through the operation's result. */
    private val scope = CoroutineScope(SupervisorJob() + dispatcher)

    /**
     * The operations from [start] to their end, so that [deadlinePassed] finds a point-to-point call
     * or an own operation (which have no front [OperationCall]) by its flight record.
     */
    private val live = ConcurrentLinkedQueue<NcclOp>()

    // Touched on the native thread only.
    private var inFlight = 0

    /** Whether an operation is between its issue and its end (native thread only). */
    val busy: Boolean get() = inFlight > 0

    /**
     * The front's deadline ([dev.tpcomm.engine.CommunicatorFront], timed from the call on the
     * core's `DeadlineWatchdog` thread, so it fires while the native thread is blocked in a library
     * call): the operation is failed with [CommunicationTimeoutException] and the communicator
     * aborted ([NcclCommHandle.abort]: `ncclCommAbort`, from another thread if the native one does
     * not take it, whose abort flag makes NCCL's blocked calls return). The caller is released now,
     * also when the operation never reached the native thread (queued behind a call blocked in the
     * library).
     */
    fun deadlinePassed(entry: FlightRecorder.Entry, call: OperationCall?) {
        val op = (call?.state as? NcclOp) ?: live.firstOrNull { it.entry === entry }
        if (op == null) {
            // Recorded, but not yet handed to the engine (its caller was held between the front's
            // record and [start]): the record carries the timeout, so that [start] ends the
            // operation with it when it comes.
            front.expire(entry, failures.named(OperationFailure(OperationFailure.TIMEOUT, failures.notStartedMessage()), entry.operation, entry.sequence) as CommunicationTimeoutException)
            // [start] may have taken it meanwhile, before the mark: both sides end it (idempotent).
            live.firstOrNull { it.entry === entry }?.let { release(it, entry.timeout!!) }
            return
        }
        if (op.timedOut != null) return
        val e = failures.timeoutError(op.entry, op.started) as CommunicationTimeoutException
        front.expire(op.entry, e)
        release(op, e)
    }

    /**
     * Releases the caller of [op], ended by its timeout [e] (the front recorded it and aborted the
     * communicator first). Idempotent.
     */
    private fun release(op: NcclOp, e: CommunicationException) {
        if (op.state.compareAndSet(NcclOp.RESERVED, NcclOp.ABANDONED)) {
            // An allocating call that never attached (its caller still waits for the allocation, which
            // the native thread has not taken, or has not issued yet): it gives up its place.
            op.allocation!!.done.completeExceptionally(e)
            wake()
            return
        }
        if (op.issued) op.output?.disarm()
        op.result.completeExceptionally(e)
    }

    /**
     * Device memory for the output of the allocating collective [call]. The call takes its place in
     * the device's issue order here, at the call (docs/nccl-semantics.md N17: one launch order per
     * device, the order of the calls; a call issued after this one, even without waiting for it, is
     * issued after it): an operation ([OperationCall.state]) is queued on the native thread now, which
     * allocates (a block cached for this communicator's stream, else `cudaMallocAsync` on it, counted
     * against the device's budget: [DeviceMemoryBudget], [DeviceOutputPool]) and then holds its place until the front issues the call ([issue] attaches
     * it). The caller waits for the allocation only; its deadline is the front's, from the call, which
     * recorded it before ([deadlinePassed] releases a caller still waiting). An allocation that does
     * not fit the budget or the device, even after reclaiming forgotten outputs, fails the call with
     * [dev.tpcomm.NativeMemoryBudgetException] (the front fails the call and issues nothing; the engine
     * does not abort). The memory is freed by the tensor's close() or, forgotten, when it becomes
     * unreachable ([DeviceFree]), unless the call failed after it was issued (the device may still write it). [producer]: the
     * communicator's producer stream of the moment.
     */
    suspend fun allocate(call: OperationCall, producer: Long, dtype: DType, shape: List<Int>): Tensor {
        val bytes = shape.fold(1L) { a, d -> a * d } * dtype.byteSize
        val o = NcclOp(ctx, call.entry, producer)
        o.call = call
        val a = OutputAllocation(bytes, currentCoroutineContext()[Job])
        o.allocation = a
        o.state.set(NcclOp.RESERVED)
        call.state = o
        start(o, null)
        val ptr = try {
            a.done.await()
        } catch (c: CancellationException) {
            if (o.state.compareAndSet(NcclOp.RESERVED, NcclOp.ABANDONED)) wake()
            throw c
        }
        // The memory is the caller's output from here, unless the native thread took it back first (given up meanwhile).
        if (!a.owned.compareAndSet(false, true)) throw givenUp(o)
        // The tensor owns the memory: its close() (or the Cleaner, if it is forgotten) frees it once.
        val free = DeviceFree(runtime, thread.memory, deviceIndex, stream, ptr, DeviceOutputPool.blockSize(a.bytes), o.producer)
        o.output = free
        return Tensor.wrapDeviceOwned(device, ptr, dtype, shape.toIntArray(), free)
    }

    /**
     * Why the reserved operation [o] was given up before its call attached: its deadline passed
     * ([deadlinePassed]), the communicator failed or was closed, or its caller was cancelled.
     */
    private fun givenUp(o: NcclOp): Throwable =
        o.timedOut
            // The communicator's refusal after a failure (as the communicator's refusal names it).
            ?: handle.failedWith()?.let { OperationFailedSignal(failures.aborted(it)) }
            ?: CancellationException("${o.name} was cancelled before it was issued")

    /** Wakes the native thread's progress loop (a reserved operation polls for its call). */
    private fun wake() {
        thread.runOnThread(Runnable {})
    }

    /**
     * On the native thread: the allocation of a reserved operation, then its place held until the
     * front attaches the call; null when it never will (its caller was refused, cancelled or failed
     * first, the communicator failed, or the deadline passed): then the place is given up.
     */
    private suspend fun reservedBody(o: NcclOp): (NcclOp.() -> Any?)? {
        val a = o.allocation!!
        if (o.state.get() == NcclOp.RESERVED) {
            val p = LongArray(1)
            val code = try {
                thread.memory.allocate(p, a.bytes.coerceAtLeast(1), stream)
            } catch (e: RuntimeException) {
                // The budget (NativeMemoryBudgetException) or its setting (IllegalArgumentException):
                // nothing was allocated and nothing issued; the caller's call fails with it as is.
                o.state.set(NcclOp.ABANDONED)
                a.done.completeExceptionally(e)
                return null
            }
            if (code != DeviceRuntime.SUCCESS) {
                o.state.set(NcclOp.ABANDONED)
                val e = failures.named(OperationFailure.native(failures.runtimeMessage(code, "mallocAsync"), code, isRuntimeError = true), o.name, o.entry.sequence)
                abort(e)
                a.done.completeExceptionally(e)
                return null
            }
            a.ptr = p[0]
            a.done.complete(p[0])
        }
        dispatcher.await(NativeRequest {
            o.state.get() != NcclOp.RESERVED || front.isClosed || handle.failedWith() != null || a.caller?.isCancelled == true
        })
        if (o.state.get() == NcclOp.ATTACHED || !o.state.compareAndSet(NcclOp.RESERVED, NcclOp.ABANDONED) && o.state.get() == NcclOp.ATTACHED) return o.body
        if (a.ptr != 0L && a.owned.compareAndSet(false, true)) { // the caller left before it had its output
            thread.memory.recycle(a.ptr, DeviceOutputPool.blockSize(a.bytes), stream) // nothing used it: back to the pool
        }
        return null
    }

    /**
     * The front's [call] was refused (its native part could not be built): the operation [allocate]
     * queued for it, if any, gives up its place at once.
     */
    fun refused(call: OperationCall) {
        val own = call.state as? NcclOp
        if (own != null && own.state.compareAndSet(NcclOp.RESERVED, NcclOp.ABANDONED)) wake()
    }

    /**
     * Queues [call]'s native part [body] on the device's thread (or hands it to the operation
     * [allocate] queued for it); the caller waits in [finish]. [producer]: the communicator's
     * producer stream of the moment.
     */
    fun issue(call: OperationCall, body: NcclOp.() -> Any?, producer: Long) {
        val own = call.state as? NcclOp // the operation [allocate] queued for it, if any
        if (own != null) {
            own.body = body
            if (!own.state.compareAndSet(NcclOp.RESERVED, NcclOp.ATTACHED)) {
                // Given up meanwhile: the deadline passed ([deadlinePassed] aborted), the communicator failed or closed, or the caller was cancelled.
                throw givenUp(own)
            }
            wake()
            return
        }
        val o = NcclOp(ctx, call.entry, producer, onStream = call.op != CollectiveOp.Split && call.op != CollectiveOp.Group)
        o.call = call
        call.state = o
        start(o, body)
    }

    /**
     * Queues [o]'s native part ([onNative] running [issue]) on the device's thread. Its deadline is
     * the front's, from the call (docs/gpu.md, "Deadlines": also while it waits for the native thread;
     * [deadlinePassed] releases its caller at the deadline).
     */
    fun start(o: NcclOp, issue: (NcclOp.() -> Any?)?) {
        live.add(o)
        o.timedOut?.let { e -> release(o, e) }
        o.native = scope.launch {
            o.job = coroutineContext[Job]
            // Its place in the device's issue order: the order the native thread takes operations in,
            // the order of the calls. It issues once the operation before it issued (a reserved one
            // may still wait for its call), and lets the next one issue once it issued or gave up.
            val prev = thread.issueTail
            val mine = CompletableDeferred<Unit>()
            thread.issueTail = mine
            o.issuedSignal = mine
            try {
                val body = issue ?: reservedBody(o)
                if (body != null) {
                    if (prev != null && !prev.isCompleted) prev.await()
                    o.result.complete(onNative(o, body))
                } else {
                    o.result.cancel()
                }
            } catch (e: Throwable) {
                o.result.completeExceptionally(e)
            } finally {
                live.remove(o)
                if (prev == null || prev.isCompleted) mine.complete(Unit) else prev.invokeOnCompletion { mine.complete(Unit) }
            }
        }
    }

    /**
     * Waits for [o]'s result. A caller cancelled while it waits leaves at once; when the operation
     * was already issued, its peers cannot finish it without this rank, and when it was still queued
     * it will never be issued ([abortNotIssued]): either way the communicator aborts (but for an
     * operation no peer pairs with, [NcclOp.paired]).
     */
    suspend fun finish(o: NcclOp): Any? {
        // Wait on this thread for a short operation rather than suspend and be woken (a cancellation
        // is seen at the await below, at most CALLER_SPIN_NANOS later).
        Backoff.spinFor(CALLER_SPIN_NANOS) { o.result.isCompleted }
        try {
            return o.result.await()
        } catch (e: CancellationException) {
            // The operation itself may end in a CancellationException (its thread closed): only the caller's own cancellation aborts here.
            if (currentCoroutineContext()[Job]?.isCancelled != true) throw e
            // The caller's reason aborts first: cancelling the native job hands it the same exception,
            // and its own abort would otherwise race this one.
            when {
                o.issued && !o.finished -> {
                    o.output?.disarm()
                    abortForCancellation(o, e)
                }
                // Still queued: it will never be issued, and its peers' call of its number has no partner.
                !o.issued && o.paired -> abortNotIssued(o.entry, e)
                else -> null
            }
            o.native?.cancel(e)
            live.remove(o)
            // The front tells a caller whose own deadline (withTimeout) aborted the communicator its
            // named timeout, as on every backend (docs/failures.md).
            throw e
        }
    }

    /**
     * The native thread's part of an operation: start its record, order after the producer,
     * signature (checkConsistency), issue, completion, frees. Its outcome is recorded by the front.
     */
    private suspend fun onNative(o: NcclOp, issue: NcclOp.() -> Any?): Any? {
        o.timedOut?.let { throw it }
        o.started = true
        o.entry.begin()
        handle.failedWith()?.let { cause -> throw OperationFailedSignal(failures.aborted(cause)) }
        o.issued = true
        inFlight++
        try {
            // Any point-to-point window open on this device's thread (this communicator's or another's)
            // ends before anything else is issued: NCCL's group is per thread (docs/nccl-semantics.md N10).
            val owner = thread.p2pOwner
            if (owner != null && (!o.p2p || owner !== p2p)) owner.endP2pWindow()
            ctx.resources.orderAfter(o.producer, o::cuda)
            // After the kernels of other worlds issued before on this device: one launch order per device (issue 35, finding 3).
            if (o.onStream || o.p2p) thread.orderAcross(ctx.worldKey, stream, o::cuda)
            val call = o.call
            if (o.onStream && checkConsistency) {
                val signature = LongArray(CollectiveSignature.SIZE)
                if (call != null) {
                    call.encodeSignature(signature, 0)
                    if (call.op == CollectiveOp.AllToAllV) o.completeSplitsWord(signature, call.sizes!!, call.outputSizes!!)
                    o.checkSignature(signature, call.sequence, front::compareSignatures)
                } else if (front.encodeStepSignature(o.entry, signature, 0)) {
                    // A staged step of an object collective: signed as the front signs every composite's steps.
                    o.checkSignature(signature, o.entry.collectiveSequence, front::compareSignatures)
                }
            }
            if (o.p2p) p2p.join(sending = o.name == "send", o::nccl)
            val result = o.issue()
            o.issuedSignal?.complete(Unit)
            if (o.p2p) {
                // Calls queued behind this one join the open group (PointToPointWindow.closeWhenDue).
                dispatcher.await(p2p.closeWhenDue())
            }
            if (o.onStream) {
                val event = o.acquireEvent()
                o.cuda(runtime.eventRecord(event, stream), "eventRecord")
                dispatcher.await(o.completion(event))
                ctx.resources.recycleEvent(event)
            }
            // Stream-ordered frees: never cudaFree/hipFree (a device synchronisation) on this thread.
            for (p in o.temps) runtime.freeAsync(p, stream)
            o.finished = true
            return result
        } catch (e: CancellationException) {
            o.output?.disarm()
            abortForCancellation(o, e)
            throw e
        } catch (e: OperationFailedSignal) {
            o.output?.disarm()
            throw e
        } catch (e: CommunicationException) {
            o.output?.disarm()
            o.entry.fail(e)
            throw e
        } catch (e: Throwable) {
            o.output?.disarm()
            throw o.fail(failures.named(OperationFailure(OperationFailure.OTHER, "unexpected failure while issuing: $e", e), o.name, o.entry.sequence))
        } finally {
            inFlight--
        }
    }

    /**
     * A call [o] in flight was cancelled: its peers cannot finish it without this rank, so the
     * communicator is aborted (unless it already failed). A caller's deadline (`withTimeout`) is a
     * [CommunicationTimeoutException] ([Front.cancellationReason]), any other cancellation an abort.
     * Returns the exception when it became the communicator's failure, else null.
     */
    private fun abortForCancellation(o: NcclOp, cause: CancellationException): CommunicationException? =
        abortForCaller(
            o.name, o.entry.sequence, cause, "while in flight (the other ranks cannot finish it without this one)",
            "a ${o.name} call in flight was cancelled (${cause.message}); the other ranks cannot finish it, so the communicator was aborted",
        )

    /**
     * The operation of [entry] was numbered but will never be issued ([cause]: its caller was
     * cancelled while it waited for the device's thread or for its output). NCCL pairs the ranks'
     * calls by their order on a communicator: each collective takes the communicator's next
     * operation count (NVIDIA/nccl `src/enqueue.cc`, where a collective's proxy operations get
     * `opCount = collOpCount++`; p2p operations likewise per peer), and no tag or number travels
     * with the data, so the peers' call of that number would meet this rank's next call and mix
     * their data (with checkConsistency off, the default, silently): the front's rule aborts the
     * communicator ([Front.abortNotIssued]).
     */
    private fun abortNotIssued(entry: FlightRecorder.Entry, cause: Throwable): CommunicationException? =
        front.abortNotIssued(entry.operation, entry.sequence, cause)

    /**
     * Aborts the communicator because its caller gave up [operation] #[sequence] ([cause]), unless it
     * already failed: a caller's deadline (`withTimeout`) as a [CommunicationTimeoutException] that
     * says [where] ([Front.cancellationReason]), anything else as an abort saying [abortedMessage].
     * Returns the exception when it became the communicator's failure, else null.
     */
    private fun abortForCaller(operation: String, sequence: Long, cause: Throwable, where: String, abortedMessage: String): CommunicationException? {
        if (handle.failedWith() != null) return null
        val reason = if (cause is TimeoutCancellationException) {
            front.cancellationReason(operation, sequence, cause, where)
        } else {
            failures.named(OperationFailure(OperationFailure.ABORTED, abortedMessage, cause), operation, sequence)
        }
        abort(reason)
        return reason.takeIf { handle.failedWith() === it }
    }

    /** First failure wins: records it and aborts the communicator ([NcclCommHandle.abort]). */
    private fun abort(cause: CommunicationException) = handle.abort(cause)
}

/**
 * How long a caller waits on its own thread for its operation to complete before it suspends
 * (`TPCOMM_GPU_CALLER_SPIN_US`, microseconds, 0 to 10,000; default 20): a short operation then ends
 * without the caller being suspended and woken, as `cudaStreamSynchronize` spins. A longer one costs
 * the caller's thread at most this long. See [DeviceThreads.IDLE_SPIN_NANOS] for what it saves.
 */
internal val CALLER_SPIN_NANOS: Long = dev.tpcomm.engine.SpinSetting.fromEnvironment("TPCOMM_GPU_CALLER_SPIN_US", defaultMicros = 20L)
