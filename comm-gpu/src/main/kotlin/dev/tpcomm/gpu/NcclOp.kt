package dev.tpcomm.gpu

import dev.tpcomm.CommunicationException
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.engine.Backoff
import dev.tpcomm.engine.CommunicatorFront
import dev.tpcomm.engine.NativeRequest
import dev.tpcomm.engine.OperationCall
import dev.tpcomm.engine.OperationFailedSignal
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.Job
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.util.concurrent.atomic.AtomicBoolean
import java.util.concurrent.atomic.AtomicInteger

/**
 * One operation of a [NcclCommunicator], from the call to its completion: its flight record [entry] (made by the front,
 * queued until the native thread starts it), the producer stream of the moment,
 * whether it ends with an event on the stream ([onStream]), the front's [call] (collectives: its
 * signature, for checkConsistency), and whether it is a point-to-point call that joins the
 * thread's window ([p2p]). Created on the caller's thread; the rest is touched on the native thread.
 *
 * Role: the operation's state, and the checked library and runtime calls its native part issues
 * (`nccl`, `cuda`, temporaries, groups, reduction operators, waits on the stream); failures are
 * named by [NcclOpContext.failures] and abort through [NcclOpContext.handle]. Thread-safety: the
 * volatile and atomic fields from any thread, the rest on the native thread only. Lifetime: made by
 * the communicator for one call, dropped when the call ended.
 */
internal class NcclOp(
    /** What the communicator's operations issue with. */
    val ctx: NcclOpContext,
    /** The flight record (the front's), by which [NcclOperationQueue.deadlinePassed] finds an operation without an [OperationCall]. */
    val entry: FlightRecorder.Entry,
    val producer: Long,
    val onStream: Boolean = true,
    val p2p: Boolean = false,
    /** Whether the peers issue a counterpart that NCCL pairs with it by order (every operation but [NcclCommunicator.waitEvent]). */
    val paired: Boolean = true,
) {
    val api: NcclApi get() = ctx.api
    val runtime: DeviceRuntime get() = ctx.runtime
    val thread: DeviceThread get() = ctx.thread
    val comm: Long get() = ctx.comm
    val stream: Long get() = ctx.stream
    val rank: Int get() = ctx.rank
    val worldSize: Int get() = ctx.worldSize

    /** The operation's name, as the flight record and exceptions show it. */
    val name: String get() = entry.operation
    /** The front's call, for a collective (its signature, for checkConsistency). */
    var call: OperationCall? = null
    /** [ATTACHED], or for an operation [NcclOperationQueue.allocate] queued before its call: [RESERVED] until attached, [ABANDONED] when it never will be. */
    val state = AtomicInteger(ATTACHED)
    /** A reserved operation's output allocation. */
    var allocation: OutputAllocation? = null
    /** A reserved operation's native part, set by [NcclOperationQueue.issue] before it attaches it. */
    var body: (NcclOp.() -> Any?)? = null
    /** Completed once this operation issued its library calls (or gave up): the next one of the device may issue. */
    var issuedSignal: CompletableDeferred<Unit>? = null

    /** Completed by the native thread, or exceptionally by the watchdog at the deadline (first wins). */
    val result = CompletableDeferred<Any?>()
    /** Set by the native thread when it takes the operation (before that it is queued). */
    @Volatile var started = false
    var job: Job? = null
    @Volatile var native: Job? = null
    @Volatile var issued = false
    @Volatile var finished = false
    val temps = ArrayList<Long>()
    /** The free of the output [NcclOperationQueue.allocate] made for this call (null: none): disarmed when the call fails after it was issued (the device may still write it). */
    var output: DeviceFree? = null

    /** The timeout its record carries once the deadline passed ([NcclOperationQueue.deadlinePassed]); the native thread throws it at its next poll. */
    val timedOut: CommunicationException? get() = entry.timeout

    fun nccl(code: Int, call: String) {
        when (code) {
            NcclResult.SUCCESS -> Unit
            NcclResult.IN_PROGRESS -> waitReady(comm, call)
            else -> throw fail(ctx.failures.ncclError(code, call, entry))
        }
    }

    fun cuda(code: Int, call: String) {
        if (code != DeviceRuntime.SUCCESS) throw fail(ctx.failures.runtimeError(code, call, entry))
    }

    /** A stream-ordered temporary (`cudaMallocAsync`), freed with `cudaFreeAsync` after the call. */
    fun temp(bytes: Long): Long {
        val p = LongArray(1)
        cuda(runtime.mallocAsync(p, bytes.coerceAtLeast(1), stream), "mallocAsync")
        temps += p[0]
        return p[0]
    }

    /**
     * Runs [body] with the `ncclRedOp_t` of [op] for [tensor]'s dtype: [builtin] ([redOp]'s code) as
     * it is; for [ReduceOp.PreMulSum] an operator made now from this rank's factor in the dtype
     * (`ncclRedOpCreatePreMulSum` with `ncclScalarHostImmediate`: NCCL copies the scalar before it
     * returns) and destroyed with `ncclRedOpDestroy` once [body] returned or threw, as PyTorch's
     * `ncclRedOpRAII` destroys it after the launch (pytorch/pytorch
     * `torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp`, `getNcclReduceOp`/`unpackPreMulSum`). NCCL
     * resolves the operator when each call is enqueued (NVIDIA/nccl `src/enqueue.cc`,
     * `taskAppend` copies the operator through `hostToDevRedOp` "since the op handle may be destroyed
     * before ncclGroupEnd()"), and "an operator may be destroyed as soon
     * as the last NCCL function which is given that operator returns" (`src/nccl.h.in`). After an
     * abort the operator ended with the communicator (`ncclCommAbort` frees `userRedOps`): it is
     * not destroyed again.
     */
    fun <T> withRedOp(op: ReduceOp, tensor: Tensor, builtin: Int, body: (Int) -> T): T {
        if (op !is ReduceOp.PreMulSum) return body(builtin)
        val handle = IntArray(1)
        Arena.ofConfined().use { a ->
            val scalar = a.allocate(8)
            val factor = op.factorIn(tensor.dtype)
            when (tensor.dtype) {
                DType.Float64 -> scalar.set(ValueLayout.JAVA_DOUBLE, 0, factor)
                DType.Float32 -> scalar.set(ValueLayout.JAVA_FLOAT, 0, factor.toFloat())
                DType.Float16 -> scalar.set(ValueLayout.JAVA_SHORT, 0, dev.tpcomm.HalfPrecision.floatToFloat16(factor.toFloat()))
                DType.BFloat16 -> scalar.set(ValueLayout.JAVA_SHORT, 0, dev.tpcomm.HalfPrecision.floatToBFloat16(factor.toFloat()))
                else -> throw IllegalStateException("PreMulSum on ${tensor.dtype} passed the argument checks")
            }
            nccl(api.redOpCreatePreMulSum(handle, scalar, dt(tensor), NcclRedOp.SCALAR_HOST_IMMEDIATE, comm), "ncclRedOpCreatePreMulSum")
        }
        val result = try {
            body(handle[0])
        } catch (t: Throwable) {
            if (!ctx.handle.isReleased) api.redOpDestroy(handle[0], comm) // the call's own failure is what the caller sees
            throw t
        }
        if (!ctx.handle.isReleased) nccl(api.redOpDestroy(handle[0], comm), "ncclRedOpDestroy")
        return result
    }

    /**
     * `ncclGroupStart`, [body], `ncclGroupEnd`. A failure inside the body ends the group first and
     * only then aborts: NCCL carries out an abort issued inside an open group only at its end.
     */
    fun group(body: () -> Unit) {
        nccl(api.groupStart(), "ncclGroupStart")
        thread.groupDepth++
        var error: Throwable? = null
        try {
            body()
        } catch (t: Throwable) {
            error = t
        }
        val end = api.groupEnd()
        thread.groupDepth--
        if (thread.groupDepth == 0 && ctx.handle.failedWith() != null && !ctx.handle.isReleased) ctx.handle.release(abort = true)
        if (error != null) throw error
        nccl(end, "ncclGroupEnd")
    }

    /** Page-locked host memory of at least [bytes] (the communicator's one staging buffer, grown on demand). */
    fun staging(bytes: Long): MemorySegment = ctx.resources.staging(bytes, ::cuda)

    fun completion(event: Long): NativeRequest = NativeRequest {
        timedOut?.let { throw it }
        ctx.handle.failedWith()?.let { cause -> throw OperationFailedSignal(ctx.failures.aborted(cause)) }
        when (val q = runtime.eventQuery(event)) {
            DeviceRuntime.SUCCESS -> {
                // A kernel that gave up on a failed peer also lets the event complete: check before reporting success.
                checkAsync(comm)
                return@NativeRequest true
            }
            DeviceRuntime.ERROR_NOT_READY -> Unit
            else -> throw fail(ctx.failures.runtimeError(q, "eventQuery", entry))
        }
        checkAsync(comm)
        false
    }

    /** Spins on the native thread until [handle] leaves `ncclInProgress` (non-blocking init, split, enqueue). */
    fun waitReady(handle: Long, call: String, alsoAbort: Long = 0L) {
        // NCCL finishes a non-blocking call on a thread of its own (src/group.cc:825-857): yield to it rather than sleep.
        val backoff = Backoff.forLibraryThread()
        while (true) {
            timedOut?.let { e ->
                if (alsoAbort != 0L && alsoAbort != comm) api.commAbort(alsoAbort)
                throw e
            }
            ctx.handle.failedWith()?.let { cause -> throw OperationFailedSignal(ctx.failures.aborted(cause)) }
            when (val state = api.asyncState(handle, ctx.status)) {
                NcclResult.SUCCESS -> return
                NcclResult.IN_PROGRESS -> Unit
                else -> {
                    if (alsoAbort != 0L && alsoAbort != comm) api.commAbort(alsoAbort)
                    throw fail(ctx.failures.ncclError(state, call, entry))
                }
            }
            // The deadline is the front's ([NcclOperationQueue.deadlinePassed]): timedOut above.
            backoff.idle()
        }
    }

    /** Waits on the native thread (inside an operation) until the stream's work so far is done; used only by the object collectives. */
    fun awaitStream() {
        val event = acquireEvent()
        cuda(runtime.eventRecord(event, stream), "eventRecord")
        val request = completion(event)
        val backoff = Backoff.forLibraryThread()
        while (!request.poll()) {
            // Blocking here keeps the issue order of the communicator's calls; a cancelled caller still gets out.
            if (job?.isActive == false) throw CancellationException("${name} was cancelled while waiting for the device")
            timedOut?.let { throw it }
            backoff.idle()
        }
        ctx.resources.recycleEvent(event)
    }

    fun checkAsync(handle: Long) {
        val state = api.asyncState(handle, ctx.status)
        if (state != NcclResult.SUCCESS && state != NcclResult.IN_PROGRESS) {
            throw fail(ctx.failures.ncclError(state, "ncclCommGetAsyncError", entry))
        }
    }

    fun acquireEvent(): Long = ctx.resources.acquireEvent(::cuda)

    /** Marks this operation failed with [error], aborts the communicator, and returns [error] for throwing. */
    fun fail(error: CommunicationException): CommunicationException {
        entry.fail(error)
        ctx.handle.abort(error)
        return error
    }

    companion object {
        /** [state]: attached to its call (every operation but a reserved one). */
        const val ATTACHED = 0
        /** [state]: queued by [NcclOperationQueue.allocate] before its call attached. */
        const val RESERVED = 1
        /** [state]: given up before its call attached. */
        const val ABANDONED = 2
    }
}

/**
 * The output allocation of a reserved [NcclOp] (see [NcclOperationQueue.allocate]): the device
 * address once the native thread allocated it, and who owns the memory. Thread-safety: [done] and
 * [owned] from any thread. Lifetime: the operation's.
 */
internal class OutputAllocation(val bytes: Long, val caller: Job?) {
    /** The device address, or the named exception of a failed (or never taken) allocation. */
    val done = CompletableDeferred<Long>()
    @Volatile var ptr = 0L
    /**
     * Who owns the memory, set once: the caller, which wraps it in its output (whose [DeviceFree]
     * then frees it), or the native thread, which frees it when the operation was given up first.
     */
    val owned = AtomicBoolean(false)
}
