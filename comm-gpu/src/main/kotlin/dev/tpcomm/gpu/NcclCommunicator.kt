package dev.tpcomm.gpu

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommConfig
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
import dev.tpcomm.coroutines.AbortEscalation
import dev.tpcomm.coroutines.Backoff
import dev.tpcomm.coroutines.CommunicatorFront
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.coroutines.NativeDispatcher
import dev.tpcomm.coroutines.NativeRequest
import dev.tpcomm.coroutines.OperationFailedSignal
import dev.tpcomm.coroutines.OperationFailure
import dev.tpcomm.spi.CollectiveOp
import dev.tpcomm.spi.CollectiveSignature
import dev.tpcomm.spi.CommunicationErrors
import dev.tpcomm.spi.ObjectProtocol
import dev.tpcomm.spi.MonitoredBarrier
import dev.tpcomm.spi.MonitoredBarrierChannel
import dev.tpcomm.spi.ObjectTransport
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.lang.ref.Cleaner
import java.util.ArrayDeque
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicBoolean
import java.util.concurrent.atomic.AtomicInteger
import java.util.concurrent.atomic.AtomicReference
import kotlin.coroutines.EmptyCoroutineContext
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Job
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.TimeoutCancellationException
import kotlinx.coroutines.currentCoroutineContext
import kotlinx.coroutines.launch
import kotlinx.coroutines.withTimeoutOrNull
import kotlinx.serialization.KSerializer

/**
 * A [Communicator] over NCCL's API ([NcclApi]) and a GPU runtime ([DeviceRuntime]): the
 * stream-ordered engine shared by the `nccl` and `rccl` backends, behind the common
 * [CommunicatorFront] (which validates, numbers, records, retains and names every failure; this
 * class issues on the device and reports [OperationFailure]s).
 *
 * **Execution.** Every communicator of the process on a device issues its library calls from that
 * device's one native thread ([DeviceThread], a [NativeDispatcher] with the device current), so all
 * launches for the device come in one order (docs/nccl-semantics.md N17); each communicator has its
 * own non-blocking stream. A call validates its arguments on the caller's thread, is recorded (as
 * queued) and starts its deadline, is queued on the native thread in call order, makes the stream wait for the work queued
 * on [producerStream] (by default the legacy default stream), enqueues the library call(s), records
 * an event after them and suspends until the event completes; the dispatcher's progress loop polls
 * the event and `ncclCommGetAsyncError`. Several calls may be in flight at once
 * (`async(start = UNDISPATCHED)`); they complete in stream order.
 *
 * **Tensors.** Only device tensors on [device] are accepted; a host tensor fails with
 * [IllegalArgumentException] and is never copied behind the caller's back. Outputs this class
 * allocates ([allGather], [reduceScatter], [gather], [allToAll], the uneven ones) are device memory
 * (`cudaMallocAsync` on this communicator's stream, on the native thread, before the call is
 * queued), freed when the returned tensor becomes unreachable, ordered after the work queued on
 * [producerStream] by then (an output of a call that failed after it was issued is never freed: the
 * device may still write it);
 * the `*Into` variants allocate nothing. Collectives along a
 * dimension other than 0 (with a non-trivial outer size) rearrange data on the device with 2-D
 * async copies through a temporary device buffer.
 *
 * **Library limits, refused with [IllegalArgumentException] before anything runs or is recorded**
 * (declared to the core's validator, [NcclLimits]): bitwise
 * reductions (NCCL and RCCL have none); [ReduceOp.Avg] and bfloat16 on libraries older than 2.10;
 * point-to-point tags other than 0 (NCCL matches messages by order only), [Communicator.ANY_SOURCE],
 * and sends to oneself. [probe] is not available (UnsupportedOperationException).
 *
 * **[ReduceOp.PreMulSum]** runs natively: each call creates its operator from this rank's factor
 * (`ncclRedOpCreatePreMulSum`, the scalar in the tensor's dtype) and destroys it after the launch,
 * also when the launch failed (unless the abort already freed it with the communicator).
 *
 * **Failure.** Past [CommConfig.timeout] (counted from the call, also while the call waits for the
 * native thread), on an asynchronous error, on a failed library call, or
 * when a call in flight is cancelled, the communicator calls `ncclCommAbort`; that call and every
 * pending and later call fail with a [CommunicationException] carrying the flight recorder's dump.
 * Peers learn of it through NCCL (`ncclRemoteError`) or their own deadline. Temporary device
 * buffers of calls that did not complete are not freed (the device may still touch them).
 *
 * Thread-safety: every method may be called from any thread or coroutine.
 */
public class NcclCommunicator internal constructor(
    private val api: NcclApi,
    private val runtime: DeviceRuntime,
    private val thread: DeviceThread,
    private val comm: Long,
    private val stream: Long,
    rank: Int,
    worldSize: Int,
    device: Device,
    backendName: String,
    private val config: CommConfig,
    /** The library's version code as `ncclGetVersion` reports it (e.g. 23007 for 2.30.7); [libraryVersion] is its text. */
    public val libraryVersionCode: Int,
    private val commConfig: NcclCommConfig,
    private val onClose: AutoCloseable? = null,
) : CommunicatorFront(
    rank, worldSize, device, backendName,
    FlightRecorder(config.flightRecorderSize, rank, backendName, worldSize = worldSize, dumpDirectory = config.flightRecorderDir),
    // The core's one argument check, run first by every operation, with what NCCL/RCCL cannot do
    // (dtypes, reductions, tags, ANY_SOURCE, messages to oneself) declared as its capabilities.
    NcclLimits(api, backendName, libraryVersionCode).validator(worldSize, rank, device),
    config.timeout,
) {
    private val dispatcher: NativeDispatcher = thread.dispatcher
    private val deviceIndex = deviceIndex(device)
    private val timeoutNanos = config.timeout.inWholeNanoseconds
    /** The `ncclComm_t`'s lifecycle: first failure, close, abort and release. */
    private val handle = NcclCommHandle(api, comm, thread, recorder, backendName, timeoutNanos)
    /** The named exceptions of failures on the device. */
    private val failures = NcclFailures(api, runtime, comm, config.timeout, { f, op, seq -> exceptionOf(f, op, seq) }, { abortedMessage(it) })
    /** Events, producer ordering, scratch and staging of [stream] (native thread only). */
    private val resources = StreamResources(runtime, stream)
    /** The point-to-point window (an open group on the device's thread) of this communicator. */
    private val p2p = PointToPointWindow(api, thread, handle, failures)
    /** What this communicator's operations issue with. */
    private val opContext = NcclOpContext(api, runtime, thread, comm, stream, rank, worldSize, backendName, libraryVersionCode, handle, failures, resources)

    /** Runs each operation's native part on the device's thread; a failure is delivered through the operation's result. */
    private val scope = CoroutineScope(SupervisorJob() + dispatcher)

    /**
     * The operations from [start] to their end, so that [deadlinePassed] finds a point-to-point call
     * or an own operation (which have no front [Call]) by its flight record.
     */
    private val live = java.util.concurrent.ConcurrentLinkedQueue<NcclOp>()

    /**
     * The front's deadline ([CommunicatorFront], timed from the call on the core's `DeadlineWatchdog`
     * thread, so it fires while the native thread is blocked in a library call): the operation is
     * failed with [CommunicationTimeoutException] and the communicator aborted ([abort]:
     * `ncclCommAbort`, from another thread if the native one does not take it, whose abort flag
     * makes NCCL's blocked calls return). The caller is released now, also when the operation never
     * reached the native thread (queued behind a call blocked in the library).
     */
    override fun deadlinePassed(entry: FlightRecorder.Entry, call: Call?) {
        val op = (call?.state as? NcclOp) ?: live.firstOrNull { it.entry === entry }
        if (op == null) {
            // Recorded, but not yet handed to the engine (its caller was held between the front's record and
            // [start]): marked here, so that [start] ends the operation with this timeout when it comes.
            val e = exceptionOf(OperationFailure(OperationFailure.TIMEOUT, notStartedMessage()), entry.operation, entry.sequence)
            entry.fail(e)
            expiredEarly[entry] = e
            abort(e)
            // [start] may have taken it meanwhile, before the mark: whichever side removes the mark ends it.
            val late = live.firstOrNull { it.entry === entry } ?: return
            if (expiredEarly.remove(entry) != null) expire(late, e)
            return
        }
        if (op.timedOut != null) return
        expire(op, timeoutError(op))
    }

    /** Timed-out flight records whose operation [start] had not taken yet (see [deadlinePassed]). */
    private val expiredEarly = java.util.concurrent.ConcurrentHashMap<FlightRecorder.Entry, CommunicationException>()

    /** Ends [op] with its timeout [e]: the communicator is marked aborted first, then the caller released. */
    private fun expire(op: NcclOp, e: CommunicationException) {
        op.timedOut = e
        abort(e)
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

    // Touched on the native thread only.
    private var inFlight = 0

    /**
     * The stream your kernels write this communicator's inputs on and read its outputs from, as
     * PyTorch's NCCL process group uses the caller's current stream. **By default the legacy default
     * stream** ([LEGACY_DEFAULT_STREAM], handle 0), which CUDA and HIP order after all earlier work of
     * every blocking stream of the device (docs/nccl-semantics.md C11).
     *
     * Every call records an event on it and makes the communicator's stream wait for that event
     * (`cudaStreamWaitEvent`: no host synchronisation), so a collective never reads an input before
     * its producer finished; an output this communicator allocated is freed ordered after the work
     * queued on it when the output became unreachable, so a kernel still reading the output never
     * sees its memory handed to another allocation. Set it to your own stream when you compute on a
     * non-blocking stream (which the legacy stream does not order with), or to [NO_PRODUCER_STREAM]
     * to opt out (then order inputs yourself, e.g. with [waitEvent]). Must be a stream of [device]
     * that outlives the calls and the outputs issued while it is set. Thread-safe; takes effect for
     * calls issued after the assignment. See docs/gpu.md, "Ordering with your kernels".
     */
    @Volatile
    public var producerStream: Long = LEGACY_DEFAULT_STREAM

    /**
     * The library and its version as text, e.g. `NCCL 2.30.7` (a String on every backend, as MPI's
     * `MPI_Get_library_version`); compare versions with [libraryVersionCode].
     */
    public val libraryVersion: String get() = "${api.libraryName} ${NcclVersion.format(libraryVersionCode)}"

    /** True once the communicator was aborted (by a failure, a timeout, a cancellation) or closed. */
    public val isAborted: Boolean get() = handle.failedWith() != null

    /** The first failure. */
    private fun failedWith(): CommunicationException? = handle.failedWith()

    /** The JSON dump of this communicator's recent operations (see [FlightRecorder.dumpJson]). */
    public fun flightRecorderDump(): String = recorder.dumpJson()

    // ---------------------------------------------------------------- the front's hooks

    /** Calls wait for the device's native thread (shared by every communicator of the device): recorded as queued until it starts them. */
    override val queuesCalls: Boolean get() = true

    override fun refusal(operation: String, collective: Boolean): OperationFailure? {
        return failedWith()?.let { abortedFailure(it) }
    }

    /**
     * Device memory for the output of the allocating collective [call]. The call takes its place in
     * the device's issue order here, at the call (docs/nccl-semantics.md N17: one launch order per
     * device, the order of the calls; a call issued after this one, even without waiting for it, is
     * issued after it): an operation ([Call.state]) is queued on the native thread now, which
     * allocates (`cudaMallocAsync` on this communicator's stream) and then holds its place until the
     * front issues the call ([issue] attaches it). The caller waits for the allocation only; its
     * deadline is the front's, from the call, which recorded it before ([deadlinePassed] releases a
     * caller still waiting). The memory is freed when the tensor becomes unreachable ([DeviceFree]),
     * unless the call failed after it was issued (the device may still write it).
     */
    override suspend fun allocate(call: Call, dtype: DType, shape: List<Int>): Tensor {
        val bytes = shape.fold(1L) { a, d -> a * d } * dtype.byteSize
        val o = NcclOp(opContext, call.entry, producerStream)
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
        val t = Tensor.wrapDevice(device, ptr, dtype, *shape.toIntArray())
        val free = DeviceFree(runtime, thread, deviceIndex, stream, ptr, o.producer)
        DeviceFree.CLEANER.register(t, free)
        o.output = free
        return t
    }

    /**
     * Why the reserved operation [o] was given up before its call attached: its deadline passed
     * ([deadlinePassed]), the communicator failed or was closed, or its caller was cancelled.
     */
    private fun givenUp(o: NcclOp): Throwable =
        o.timedOut
            ?: refusal(o.name, collective = true)?.let { OperationFailedSignal(it) }
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
            val code = runtime.mallocAsync(p, a.bytes.coerceAtLeast(1), stream)
            if (code != DeviceRuntime.SUCCESS) {
                o.state.set(NcclOp.ABANDONED)
                val e = exceptionOf(OperationFailure.native(runtimeMessage(code, "mallocAsync"), code, isRuntimeError = true), o.name, o.entry.sequence)
                abort(e)
                a.done.completeExceptionally(e)
                return null
            }
            a.ptr = p[0]
            a.done.complete(p[0])
        }
        dispatcher.await(NativeRequest {
            o.state.get() != NcclOp.RESERVED || isClosed || failedWith() != null || a.caller?.isCancelled == true
        })
        if (o.state.get() == NcclOp.ATTACHED || !o.state.compareAndSet(NcclOp.RESERVED, NcclOp.ABANDONED) && o.state.get() == NcclOp.ATTACHED) return o.body
        if (a.ptr != 0L && a.owned.compareAndSet(false, true)) runtime.freeAsync(a.ptr, stream) // the caller left before it had its output
        return null
    }

    /**
     * Checks what NCCL/RCCL add to the front's validation ([IllegalArgumentException], nothing
     * issued), then queues [call]'s native part on the device's thread (or hands it to the operation
     * [allocate] queued for it); the caller waits in [await].
     */
    override fun issue(call: Call): Any? {
        val own = call.state as? NcclOp // the operation [allocate] queued for it, if any
        val body = try {
            nativePart(call)
        } catch (t: Throwable) {
            if (own != null && own.state.compareAndSet(NcclOp.RESERVED, NcclOp.ABANDONED)) wake() // refused: it gives up its place at once
            throw t
        }
        if (own != null) {
            own.body = body
            if (!own.state.compareAndSet(NcclOp.RESERVED, NcclOp.ATTACHED)) {
                // Given up meanwhile: the deadline passed ([deadlinePassed] aborted), the communicator failed or closed, or the caller was cancelled.
                throw givenUp(own)
            }
            wake()
            return PENDING
        }
        val o = NcclOp(opContext, call.entry, producerStream, onStream = call.op != CollectiveOp.Split && call.op != CollectiveOp.Group)
        o.call = call
        call.state = o
        start(o, body)
        return PENDING
    }

    /**
     * The front gave up on [call] before issuing it: the operation [allocate] queued for it gives up
     * its place at once, and the communicator is aborted ([abortNotIssued]).
     */
    override fun notIssued(call: Call, cause: Throwable) {
        val own = call.state as? NcclOp
        if (own != null && own.state.compareAndSet(NcclOp.RESERVED, NcclOp.ABANDONED)) wake()
        abortNotIssued(call.entry, cause)
    }

    /**
     * The operation of [entry] was numbered but will never be issued ([cause]: its caller was
     * cancelled while it waited for the device's thread or for its output, or a tensor was closed
     * meanwhile). NCCL pairs the ranks' calls by their order on a communicator: each collective takes
     * the communicator's next operation count (NVIDIA/nccl `src/enqueue.cc`, where a collective's
     * proxy operations get `opCount = collOpCount++`; p2p operations likewise per peer), and no tag
     * or number travels with the data. The peers' call of that number would meet this rank's next
     * call and mix their data (with checkConsistency off, the default, silently). So the communicator
     * is aborted, unless it already failed or closed or has no peers, as MPI's is for a call
     * cancelled before it started. A caller's deadline is a [CommunicationTimeoutException], as for
     * [abortForCancellation]; returns the exception when it became the communicator's failure.
     */
    private fun abortNotIssued(entry: FlightRecorder.Entry, cause: Throwable): CommunicationException? {
        if (worldSize == 1 || isClosed) return null
        val why = "NCCL pairs the ranks' calls by their order on the communicator, so the other ranks' ${entry.operation} would meet this rank's next call"
        return abortForCaller(
            entry.operation, entry.sequence, cause, "before it was issued ($why)",
            "${entry.operation} #${entry.sequence} was given up before it was issued (${cause.message}); $why: the communicator was aborted",
        )
    }

    /**
     * Aborts the communicator because its caller gave up [operation] #[sequence] ([cause]), unless it
     * already failed: a caller's deadline (`withTimeout`) as a [CommunicationTimeoutException] that
     * says [where] ([cancellationReason]), anything else as an abort saying [abortedMessage]. Returns
     * the exception when it became the communicator's failure, else null.
     */
    private fun abortForCaller(operation: String, sequence: Long, cause: Throwable, where: String, abortedMessage: String): CommunicationException? {
        if (failedWith() != null) return null
        val reason = if (cause is TimeoutCancellationException) {
            cancellationReason(operation, sequence, cause, where)
        } else {
            exceptionOf(OperationFailure(OperationFailure.ABORTED, abortedMessage, cause), operation, sequence)
        }
        abort(reason)
        return reason.takeIf { failedWith() === it }
    }

    override suspend fun await(call: Call): Any? = finish(call.state as NcclOp)

    /** [block] as an operation's native part (a lambda with [NcclOp] as its receiver). */
    private fun onDevice(block: NcclOp.() -> Any?): NcclOp.() -> Any? = block

    /** What [call] runs on the native thread (null as a result: the front returns the operation's own value). */
    private fun nativePart(call: Call): NcclOp.() -> Any? {
        return when (call.op) {
            CollectiveOp.AllReduce -> {
                val t = call.input!!
                val op = call.reduceOp!!
                val red = redOp(op, t.dtype)
                onDevice { withRedOp(op, t, red) { r -> nccl(api.allReduce(t.address, t.address, t.numel, dt(t), r, comm, stream), "ncclAllReduce") }; null }
            }
            CollectiveOp.Broadcast -> {
                val t = call.input!!
                val root = call.root
                onDevice {
                    val type = moveTypeFor(t, libraryVersionCode)
                    nccl(api.broadcast(t.address, t.address, moveCount(t, type), type, root, comm, stream), "ncclBroadcast")
                    null
                }
            }
            CollectiveOp.Reduce -> {
                val t = call.input!!
                val op = call.reduceOp!!
                val red = redOp(op, t.dtype)
                val root = call.root
                onDevice { withRedOp(op, t, red) { r -> nccl(api.reduce(t.address, t.address, t.numel, dt(t), r, root, comm, stream), "ncclReduce") }; null }
            }
            CollectiveOp.AllGather -> {
                val input = call.input!!
                val out = call.output!!
                val dim = call.dim
                onDevice { issueAllGather(out, input, dim); null }
            }
            CollectiveOp.ReduceScatter -> {
                val input = call.input!!
                val op = call.reduceOp!!
                val red = redOp(op, input.dtype)
                val out = call.output!!
                val dim = call.dim
                onDevice { withRedOp(op, input, red) { r -> issueReduceScatter(out, input, r, dim) }; null }
            }
            CollectiveOp.Gather -> {
                val input = call.input!!
                val root = call.root
                val out = call.output
                val outer = outerCount(input.shape, call.dim)
                onDevice { gatherOnDevice(input, out, root, outer); null }
            }
            CollectiveOp.Scatter -> {
                val output = call.output!!
                val src = call.input
                val root = call.root
                val outer = outerCount(output.shape, call.dim)
                onDevice { scatterOnDevice(output, src, root, outer); null }
            }
            CollectiveOp.AllToAll -> {
                val input = call.input!!
                val out = call.output!!
                val outer = outerCount(input.shape, call.dim)
                onDevice { allToAllOnDevice(out, input, outer); null }
            }
            // The uneven collectives (sizes count rows along dim 0): NCCL has none; each is one group on the
            // stream, as PyTorch's ProcessGroupNCCL does for uneven sizes (see issueAllGatherV and the others).
            // Zero-row blocks issue nothing (every rank agrees on the sizes, so every rank skips the same calls).
            CollectiveOp.AllGatherV -> {
                val input = call.input!!
                val out = call.output!!
                val sizes = call.sizes!!
                onDevice { issueAllGatherV(out, input, sizes); null }
            }
            CollectiveOp.ReduceScatterV -> {
                val input = call.input!!
                val op = call.reduceOp!!
                val red = redOp(op, input.dtype)
                val out = call.output!!
                val sizes = call.sizes!!
                onDevice { withRedOp(op, input, red) { r -> issueReduceScatterV(out, input, sizes, r) }; null }
            }
            CollectiveOp.AllToAllV -> {
                val input = call.input!!
                val out = call.output!!
                val inputSplits = call.sizes!!
                val outputSplits = call.outputSizes!!
                onDevice { issueAllToAllV(out, input, inputSplits, outputSplits); null }
            }
            CollectiveOp.Barrier -> {
                onDevice {
                    val scratch = resources.barrierScratch(::cuda)
                    nccl(api.allReduce(scratch, scratch, 1, NcclDataType.INT32, NcclRedOp.SUM, comm, stream), "ncclAllReduce")
                    null
                }
            }
            CollectiveOp.Split -> {
                val extra = call.extra as IntArray
                val color = if (extra[0] == 0) null else extra[1]
                val key = extra[2]
                onDevice { splitOnDevice(color, key, commConfig, ::child) }
            }
            CollectiveOp.Group -> {
                // As the interface's group: a split with color 0 for the members, in the order given.
                @Suppress("UNCHECKED_CAST")
                val position = (call.extra as List<Int>).indexOf(rank)
                onDevice { splitOnDevice(if (position >= 0) 0 else null, if (position >= 0) position else 0, commConfig, ::child) }
            }
            else -> throw IllegalStateException("${call.op} is not a collective the front issues")
        }
    }

    /**
     * The object operations' bytes (the front runs them, [ObjectProtocol]: lengths first, checked,
     * then the padded payloads): their JSON bytes move through temporary device buffers on this
     * communicator's stream ([objects]: the only host staging this class does). A gather and a
     * scatter are a grouped `ncclSend`/`ncclRecv` of the padded bytes; an object message is two
     * messages, length then bytes, each staged and sent in a group of its own: unlike [send], each
     * completes only when its peer receives it and holds this device's thread meanwhile, so order
     * object exchanges between two ranks (one sends first, the other receives first); tag 0 only, no
     * `ANY_SOURCE`.
     */
    override val objectTransport: ObjectTransport get() = objects

    /**
     * The monitored barrier's channel: the staged object messages ([objects]' `sendLength`/`recvLength`,
     * tag 0, recorded under the front's `monitoredBarrier`). NCCL matches messages between two ranks by
     * issue order only and has no wildcards, so no user receive can take them out of order. A receive
     * holds the device's thread until it matched, so rank 0 receives in rank order, names the first
     * missing rank, and aborts (`ncclCommAbort`) before it could answer the others: they fail through
     * NCCL or their own deadline.
     */
    override val monitoredBarrierChannel: MonitoredBarrierChannel get() = control

    private val control = object : MonitoredBarrierChannel {
        override val errors: CommunicationErrors get() = this@NcclCommunicator.errors
        override val concurrentReceives: Boolean get() = false
        override val callTimeout: kotlin.time.Duration get() = config.timeout

        override suspend fun send(value: Long, dst: Int) {
            objects.sendLength(MonitoredBarrier.OPERATION, value, dst, 0)
        }

        override suspend fun recv(src: Int): Long = objects.recvLength(MonitoredBarrier.OPERATION, src, 0).first

        override fun ensureUsable() {
            refusal(MonitoredBarrier.OPERATION, collective = false)?.let { throw exceptionOf(it, MonitoredBarrier.OPERATION, CommunicationErrors.NO_SEQUENCE) }
        }

        override fun abort(cause: CommunicationException) {
            this@NcclCommunicator.abort(cause)
        }
    }

    /** The object collectives' bytes, staged through temporary device buffers on this communicator's stream. */
    private val objects = StagedObjectTransport(rank, worldSize, object : StagedObjectTransport.Operations {
        override suspend fun <T> collective(operation: String, root: Int, body: NcclOp.() -> T): T = own(beginOwnCollective(operation, root), issue = body)
        override suspend fun <T> pointToPoint(operation: String, peer: Int, tag: Int, body: NcclOp.() -> T): T = own(beginPointToPoint(operation, null, peer, tag), issue = body)
    })

    // ---------------------------------------------------------------- point to point

    override suspend fun issueSend(entry: FlightRecorder.Entry, tensor: Tensor, dst: Int, tag: Int) {
        val o = NcclOp(opContext, entry, producerStream, p2p = true)
        start(o) { nccl(api.send(tensor.address, tensor.byteSize, BYTES, dst, comm, stream), "ncclSend") }
        finish(o)
    }

    override suspend fun issueRecv(entry: FlightRecorder.Entry, tensor: Tensor, src: Int, tag: Int): MessageInfo {
        val o = NcclOp(opContext, entry, producerStream, p2p = true)
        start(o) { nccl(api.recv(tensor.address, tensor.byteSize, BYTES, src, comm, stream), "ncclRecv") }
        finish(o)
        return MessageInfo(src, 0, tensor.byteSize)
    }

    /** Never called: NCCL has no probe, so the front's validator refuses every probe first ([NcclLimits]). */
    override suspend fun issueProbe(entry: FlightRecorder.Entry, src: Int, tag: Int): MessageInfo =
        throw IllegalStateException("probe reached the $backendName engine although its validator refuses it (NcclLimits.noProbeReason)")

    /**
     * Sends [send] to [dst] and receives [recv] from [src] as **one** NCCL group
     * (`ncclGroupStart`; `ncclSend`; `ncclRecv`; `ncclGroupEnd`), so the two progress together: the
     * way to write ring and pairwise exchanges on NCCL (NVIDIA/nccl
     * `docs/userguide/source/usage/p2p.rst`:17-24: calls that must progress concurrently must be in one
     * group, or they may deadlock). Same checks and failure rules as [send] and [recv].
     */
    public suspend fun sendRecv(send: Tensor, dst: Int, recv: Tensor, src: Int): MessageInfo {
        sendRecv(listOf(PointToPoint.send(send, dst), PointToPoint.recv(recv, src)))
        return MessageInfo(src, 0, recv.byteSize)
    }

    /**
     * [Communicator.sendRecv]'s batch: every send and receive of [ops] as **one** NCCL group, in the
     * given order, returning when all of them completed: the exact way to write any exchange whose
     * transfers must progress together, as PyTorch's `batch_isend_irecv`. Separate [send]/[recv]
     * calls are only grouped when they arrive within a few milliseconds of each other (docs/gpu.md);
     * a batch does not depend on timing. Tags must be 0 (a receive may say [Communicator.ANY_TAG]),
     * peers explicit ranks other than this one: the front's validator checks each element as [send] or
     * [recv] checks it ([IllegalArgumentException], nothing issued or recorded); the whole batch
     * is one `sendRecv` operation in the flight record, its tensors retained until it ends; failure
     * and cancellation as for a collective.
     */
    override suspend fun issueBatch(ops: List<PointToPoint>): List<MessageInfo> {
        if (ops.isEmpty()) return emptyList()
        val first = ops.first()
        val entry = beginPointToPoint("sendRecv", first.tensor, first.peer, FlightRecorder.NONE)
        var held = 0
        try {
            for (o in ops) { o.tensor.retain("sendRecv"); held++ }
            recorded(entry) {
                val op = NcclOp(opContext, entry, producerStream)
                start(op) {
                    thread.p2pOwner?.endP2pWindow()
                    group {
                        for (o in ops) {
                            if (o.isSend) {
                                nccl(api.send(o.tensor.address, o.tensor.byteSize, BYTES, o.peer, comm, stream), "ncclSend")
                            } else {
                                nccl(api.recv(o.tensor.address, o.tensor.byteSize, BYTES, o.peer, comm, stream), "ncclRecv")
                            }
                        }
                    }
                }
                finish(op)
            }
        } catch (t: Throwable) {
            if (held < ops.size) { // a tensor closed before the batch was issued: its peers' counterparts have no partner
                entry.fail(t)
                abortNotIssued(entry, t)
            }
            throw t
        } finally {
            for (i in 0 until held) ops[i].tensor.release()
        }
        return ops.map { MessageInfo(it.peer, 0, it.tensor.byteSize) }
    }

    /**
     * Orders every call issued after this one after [event] (a `cudaEvent_t`/`hipEvent_t` the caller
     * recorded on its own stream, e.g. after the kernel that writes the next input): one
     * `cudaStreamWaitEvent` on the communicator's stream, no host synchronisation. The per-call
     * counterpart of [producerStream]. Cancellation and failure as for a collective.
     */
    public suspend fun waitEvent(event: Long) {
        require(event != 0L) { "waitEvent: pass a recorded event, got NULL" }
        own(beginOwnCollective("waitEvent"), onStream = false, paired = false) {
            cuda(runtime.streamWaitEvent(stream, event), "streamWaitEvent")
        }
    }

    /**
     * Releases the communicator: waits (up to [CommConfig.timeout]) for the calls already queued,
     * then `ncclCommDestroy` (or `ncclCommAbort` after a failure), destroys the stream and events and
     * ends the native thread. Calls still in flight fail with [CommunicatorAbortedException].
     * Idempotent; later calls throw [CommunicatorAbortedException].
     */
    override fun shutdown() {
        val done = CountDownLatch(1)
        val task = Runnable {
            try {
                nativeClose()
            } finally {
                done.countDown()
            }
        }
        if (dispatcher.isNativeThread) {
            task.run()
        } else {
            dispatcher.dispatch(EmptyCoroutineContext, task)
            if (!done.await(timeoutNanos, TimeUnit.NANOSECONDS)) {
                // The native thread is blocked in the library: abort from here so that it returns.
                if (!handle.isReleased) handle.release(abort = true)
            }
        }
        if (done.count == 0L) thread.release(timeoutNanos) // a thread still blocked is left running (daemon) rather than joined forever
        runCatching { onClose?.close() }
    }

    /** A child of a split (or group) sharing this device's native thread: one launch order per device (SharedDispatcher). */
    private fun child(childComm: Long, childStream: Long, childRank: Int, childWorldSize: Int): NcclCommunicator =
        NcclCommunicator(
            api, runtime, thread.retain(), childComm, childStream, childRank, childWorldSize, device, backendName,
            config.copy(worldSize = childWorldSize, rank = childRank, localRank = config.localRank),
            libraryVersionCode, commConfig,
        )

    override fun toString(): String = "NcclCommunicator($backendName rank $rank of $worldSize on $device)"

    // ---------------------------------------------------------------- machinery

    /**
     * Queues [o]'s native part ([onNative] running [issue]) on the device's thread. Its deadline is
     * the front's, from the call (docs/gpu.md, "Deadlines": also while it waits for the native thread;
     * [deadlinePassed] releases its caller at the deadline).
     */
    private fun start(o: NcclOp, issue: (NcclOp.() -> Any?)?) {
        live.add(o)
        if (expiredEarly.isNotEmpty()) expiredEarly.remove(o.entry)?.let { e -> expire(o, e) }
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
    private suspend fun finish(o: NcclOp): Any? {
        try {
            return o.result.await()
        } catch (e: CancellationException) {
            // The operation itself may end in a CancellationException (its thread closed): only the caller's own cancellation aborts here.
            if (currentCoroutineContext()[Job]?.isCancelled != true) throw e
            // The caller's reason aborts first: cancelling the native job hands it the same exception,
            // and its own abort would otherwise race this one.
            val reason = when {
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
            // The caller's own deadline (withTimeout) that aborted the communicator is a timeout, as on
            // every backend (README), also when the native side's abort for the same cancellation won.
            val timeout = reason as? CommunicationTimeoutException
                ?: (failedWith() as? CommunicationTimeoutException)?.takeIf { it.cause === e }
            if (timeout != null) throw timeout
            throw e
        }
    }

    /** An operation the backend runs itself ([entry] from [beginOwnCollective] or [beginPointToPoint]): issued as the front's, recorded by [recorded]. */
    private suspend fun <T> own(entry: FlightRecorder.Entry, onStream: Boolean = true, paired: Boolean = true, issue: NcclOp.() -> T): T = recorded(entry) {
        val o = NcclOp(opContext, entry, producerStream, onStream, paired = paired)
        start(o, issue)
        @Suppress("UNCHECKED_CAST")
        finish(o) as T
    }

    /**
     * The native thread's part of an operation: start its record, order after the producer,
     * signature (checkConsistency), issue, completion, frees. Its outcome is recorded by the front.
     */
    private suspend fun onNative(o: NcclOp, issue: NcclOp.() -> Any?): Any? {
        o.timedOut?.let { throw it }
        o.started = true
        o.entry.begin()
        failedWith()?.let { cause -> throw OperationFailedSignal(abortedFailure(cause)) }
        o.issued = true
        inFlight++
        try {
            // Any point-to-point window open on this device's thread (this communicator's or another's)
            // ends before anything else is issued: NCCL's group is per thread (docs/nccl-semantics.md N10).
            val owner = thread.p2pOwner
            if (owner != null && (!o.p2p || owner !== p2p)) owner.endP2pWindow()
            resources.orderAfter(o.producer, o::cuda)
            val call = o.call
            if (o.onStream && config.checkConsistency == true && worldSize > 1) {
                val signature = LongArray(CollectiveSignature.SIZE)
                if (call != null) {
                    call.encodeSignature(signature, 0)
                    if (call.op == CollectiveOp.AllToAllV) o.completeSplitsWord(signature, call.sizes!!, call.outputSizes!!)
                    o.checkSignature(signature, call.sequence, ::compareSignatures)
                } else if (encodeStepSignature(o.entry, signature, 0)) {
                    // A staged step of an object collective: signed as the front signs every composite's steps.
                    o.checkSignature(signature, o.entry.collectiveSequence, ::compareSignatures)
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
                resources.recycleEvent(event)
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
            throw o.fail(exceptionOf(OperationFailure(OperationFailure.OTHER, "unexpected failure while issuing: $e", e), o.name, o.entry.sequence))
        } finally {
            inFlight--
        }
    }

    /**
     * A call [o] in flight was cancelled: its peers cannot finish it without this rank, so the
     * communicator is aborted (unless it already failed). A caller's deadline (`withTimeout`) is a
     * [CommunicationTimeoutException] ([cancellationReason]), any other cancellation an abort.
     * Returns the exception when it became the communicator's failure, else null.
     */
    private fun abortForCancellation(o: NcclOp, cause: CancellationException): CommunicationException? =
        abortForCaller(
            o.name, o.entry.sequence, cause, "while in flight (the other ranks cannot finish it without this one)",
            "a ${o.name} call in flight was cancelled (${cause.message}); the other ranks cannot finish it, so the communicator was aborted",
        )

    /** First failure wins: records it and aborts the communicator ([NcclCommHandle.abort]). */
    private fun abort(cause: CommunicationException) = handle.abort(cause)

    private fun nativeClose() {
        val busy = inFlight > 0
        handle.failQuietly(closedException()) // the lifecycle's own exception (no operation of the front)
        // A window open on the device's thread (this communicator's or another's) ends first: a
        // finalize or abort issued inside it would join that group (docs/nccl-semantics.md N10, N12).
        thread.p2pOwner?.endP2pWindow()
        val healthy = !busy && failedWith()?.operation == "close"
        handle.release(abort = !healthy)
        // Page-locked memory is freed only when the device is known idle (cudaFreeHost synchronises);
        // after a failure the device may still write it, so it is left to the process.
        resources.release(healthy)
        // Outputs of this communicator still alive are freed on its stream later: it is destroyed with the device's thread.
        thread.retireStream(stream)
    }

    // ---------------------------------------------------------------- validation and errors

    // The failures below fail the flight record first, so that the dump the exception carries shows it failed.

    private fun runtimeMessage(code: Int, call: String): String = failures.runtimeMessage(code, call)

    private fun notStartedMessage(): String = failures.notStartedMessage()

    /** [op] passed its deadline ([NcclFailures.timeoutError]). */
    private fun timeoutError(op: NcclOp): CommunicationException = failures.timeoutError(op.entry, op.started)

    public companion object {
        /**
         * The legacy default stream (`cudaStreamLegacy` used as handle 0, HIP's null stream): the
         * default [producerStream]. It waits for all earlier work of the device's blocking streams, and
         * they wait for it (docs/nccl-semantics.md C11).
         */
        public const val LEGACY_DEFAULT_STREAM: Long = 0L

        /** [producerStream] value that opts out of ordering with the caller's stream. */
        public const val NO_PRODUCER_STREAM: Long = -1L

    }
}

internal fun deviceIndex(device: Device): Int = when (device) {
    is Device.Cuda -> device.index
    is Device.Rocm -> device.index
    Device.Host -> throw IllegalArgumentException("a GPU communicator needs a GPU device, got $device")
}
