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
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.coroutines.NativeDispatcher
import dev.tpcomm.coroutines.NativeRequest
import dev.tpcomm.spi.CollectiveChecks
import dev.tpcomm.spi.CollectiveOp
import dev.tpcomm.spi.CollectiveSignature
import dev.tpcomm.spi.CollectiveValidator
import dev.tpcomm.spi.DeadlineWatchdog
import dev.tpcomm.spi.CommunicationErrors
import dev.tpcomm.spi.FailureState
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
import java.util.concurrent.atomic.AtomicReference
import kotlin.coroutines.EmptyCoroutineContext
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Job
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.currentCoroutineContext
import kotlinx.coroutines.launch
import kotlinx.serialization.KSerializer

/**
 * A [Communicator] over NCCL's API ([NcclApi]) and a GPU runtime ([DeviceRuntime]): the
 * stream-ordered engine shared by the `nccl` and `rccl` backends.
 *
 * **Execution.** Every communicator of the process on a device issues its library calls from that
 * device's one native thread ([DeviceThread], a [NativeDispatcher] with the device current), so all
 * launches for the device come in one order (docs/nccl-semantics.md N17); each communicator has its
 * own non-blocking stream. A call validates its arguments on the caller's thread, starts its
 * deadline, is queued on the native thread in call order, makes the stream wait for the work queued
 * on [producerStream] (by default the legacy default stream), enqueues the library call(s), records
 * an event after them and suspends until the event completes; the dispatcher's progress loop polls
 * the event and `ncclCommGetAsyncError`. Several calls may be in flight at once
 * (`async(start = UNDISPATCHED)`); they complete in stream order.
 *
 * **Tensors.** Only device tensors on [device] are accepted; a host tensor fails with
 * [IllegalArgumentException] and is never copied behind the caller's back. Outputs this class
 * allocates ([allGather], [reduceScatter], [gather], [allToAll]) are device memory freed when the
 * returned tensor becomes unreachable, ordered after the work queued on [producerStream] by then;
 * the `*Into` variants allocate nothing. Collectives along a
 * dimension other than 0 (with a non-trivial outer size) rearrange data on the device with 2-D
 * async copies through a temporary device buffer.
 *
 * **Library limits, refused with [IllegalArgumentException] before anything runs:** bitwise
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
    override val rank: Int,
    override val worldSize: Int,
    override val device: Device,
    override val backendName: String,
    private val config: CommConfig,
    /** The library's version code as `ncclGetVersion` reports it (e.g. 23007 for 2.30.7); [libraryVersion] is its text. */
    public val libraryVersionCode: Int,
    private val commConfig: NcclCommConfig,
    private val onClose: AutoCloseable? = null,
) : Communicator, dev.tpcomm.coroutines.FlightRecorded {
    private val dispatcher: NativeDispatcher = thread.dispatcher
    private val deviceIndex = deviceIndex(device)
    /**
     * The core's one argument check, run first by every operation; NCCL/RCCL's dtypes come in as
     * [dtypeRefusal][CollectiveValidator.dtypeRefusal]: bfloat16 needs 2.10 (unreachable through
     * [NcclConnector], whose minimum is 2.18).
     */
    private val validator = CollectiveValidator(worldSize, device, nativeMemory = false, dtypeRefusal = { dtype ->
        if (dtype == DType.BFloat16 && libraryVersionCode < NcclVersion.AVG_AND_BFLOAT16) {
            "${api.libraryName} ${NcclVersion.format(libraryVersionCode)} has no bfloat16 (needs 2.10 or later); use Float16/Float32 or upgrade"
        } else {
            null
        }
    })
    private val recorder = FlightRecorder(config.flightRecorderSize, rank, backendName, worldSize = worldSize, dumpDirectory = config.flightRecorderDir)
    /** The only builder of this communicator's exceptions, and its failure state (first cause wins). */
    private val errors = CommunicationErrors(rank, backendName) { recorder.dumpJson() }
    private val failures = FailureState(errors)
    private val closed = AtomicBoolean(false)
    private val commReleased = AtomicBoolean(false)
    private val timeoutNanos = config.timeout.inWholeNanoseconds

    /** Runs each operation's native part on the device's thread; a failure is delivered through the operation's result. */
    private val scope = CoroutineScope(SupervisorJob() + dispatcher)

    /** The operations from their call to their end, timed by the core's [DeadlineWatchdog] off the native thread. */
    private val live = java.util.concurrent.ConcurrentLinkedQueue<Op>()

    /**
     * The deadline check: on the watchdog's thread, so it fires while the native thread is blocked
     * in a library call. An operation past its deadline is failed with [CommunicationTimeoutException]
     * and the communicator aborted ([abort]: `ncclCommAbort`, from another thread if the native one
     * does not take it, whose abort flag makes NCCL's blocked calls return).
     */
    private val watched = DeadlineWatchdog.Watched { now -> checkDeadlines(now) }

    /** Weak: a communicator its user forgot to close is not kept alive by the watchdog ([watched] lives as long as this). */
    private val deadlineWatch: DeadlineWatchdog.Registration =
        DeadlineWatchdog.register(watched, DeadlineWatchdog.periodFor(config.timeout.inWholeMilliseconds), weak = true)

    private fun checkDeadlines(now: Long) {
        for (op in live) {
            if (op.timedOut == null && now - op.deadline > 0) {
                val e = timeoutError(op)
                op.timedOut = e
                // The caller is released now, even when the operation never reached the native thread
                // (queued behind a call blocked in the library): the deadline runs from the call.
                op.result.completeExceptionally(e)
                abort(e)
            }
        }
    }

    // Touched on the native thread only.
    private val events = ArrayDeque<Long>()
    private val allEvents = ArrayList<Long>()
    private var scratch = 0L
    private var inFlight = 0
    private val status = IntArray(1)
    /** Page-locked staging buffer (cudaHostAlloc/hipHostMalloc), grown on demand: copies to it never block. */
    private var pinned = 0L
    private var pinnedBytes = 0L
    private val retiredPinned = ArrayList<Long>()
    private var producerEvent = 0L

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
    public val isAborted: Boolean get() = failures.isAborted

    /** The first failure (every cause this communicator records is a [CommunicationException]). */
    private fun failedWith(): CommunicationException? = failures.cause as CommunicationException?

    /** The JSON dump of this communicator's recent operations (see [FlightRecorder.dumpJson]). */
    public fun flightRecorderDump(): String = recorder.dumpJson()

    /** This communicator's flight recorder. */
    override val flightRecorder: FlightRecorder get() = recorder

    // ---------------------------------------------------------------- collectives

    override suspend fun allReduce(tensor: Tensor, op: ReduceOp): Tensor {
        val name = "allReduce"
        validator.allReduce(tensor, op)
        val red = checkOp(op, tensor.dtype, name)
        return run(name, tensor, op = op, signature = sig(CollectiveOp.AllReduce, tensor, op)) {
            withRedOp(op, tensor, red) { r -> nccl(api.allReduce(tensor.address, tensor.address, tensor.numel, dt(tensor), r, comm, stream), "ncclAllReduce") }
            tensor
        }
    }

    override suspend fun broadcast(tensor: Tensor, root: Int): Tensor {
        val name = "broadcast"
        validator.broadcast(tensor, root)
        return run(name, tensor, root = root, signature = sig(CollectiveOp.Broadcast, tensor, root = root)) {
            val type = moveType(tensor)
            nccl(api.broadcast(tensor.address, tensor.address, moveCount(tensor, type), type, root, comm, stream), "ncclBroadcast")
            tensor
        }
    }

    override suspend fun reduce(tensor: Tensor, root: Int, op: ReduceOp): Tensor {
        val name = "reduce"
        validator.reduce(tensor, root, op)
        val red = checkOp(op, tensor.dtype, name)
        return run(name, tensor, root = root, op = op, signature = sig(CollectiveOp.Reduce, tensor, op, root)) {
            withRedOp(op, tensor, red) { r -> nccl(api.reduce(tensor.address, tensor.address, tensor.numel, dt(tensor), r, root, comm, stream), "ncclReduce") }
            tensor
        }
    }

    override suspend fun allGather(input: Tensor, dim: Int): Tensor {
        val name = "allGather"
        val shape = validator.allGatherShape(input, dim)
        val d = CollectiveValidator.normalise(input, dim)
        return run(name, input, dim = d, signature = sig(CollectiveOp.AllGather, input, dim = d)) {
            val out = allocateOutput(input.dtype, shape)
            issueAllGather(out, input, d)
            out
        }
    }

    override suspend fun allGatherInto(output: Tensor, input: Tensor, dim: Int): Tensor {
        val name = "allGather"
        val d = validator.allGatherInto(output, input, dim)
        return run(name, input, dim = d, signature = sig(CollectiveOp.AllGather, input, dim = d)) {
            issueAllGather(output, input, d)
            output
        }
    }

    override suspend fun reduceScatter(input: Tensor, op: ReduceOp, dim: Int): Tensor {
        val name = "reduceScatter"
        val shape = validator.reduceScatterShape(input, op, dim)
        val d = CollectiveValidator.normalise(input, dim)
        val red = checkOp(op, input.dtype, name)
        return run(name, input, op = op, dim = d, signature = sig(CollectiveOp.ReduceScatter, input, op, dim = d)) {
            val out = allocateOutput(input.dtype, shape)
            withRedOp(op, input, red) { r -> issueReduceScatter(out, input, r, d) }
            out
        }
    }

    override suspend fun reduceScatterInto(output: Tensor, input: Tensor, op: ReduceOp, dim: Int): Tensor {
        val name = "reduceScatter"
        val d = validator.reduceScatterInto(output, input, op, dim)
        val red = checkOp(op, input.dtype, name)
        return run(name, input, op = op, dim = d, signature = sig(CollectiveOp.ReduceScatter, input, op, dim = d)) {
            withRedOp(op, input, red) { r -> issueReduceScatter(output, input, r, d) }
            output
        }
    }

    override suspend fun gather(input: Tensor, root: Int, dim: Int): Tensor? {
        val name = "gather"
        val shape = validator.gatherShape(input, root, dim)
        val d = CollectiveValidator.normalise(input, dim)
        val outer = outerCount(input.shape, d)
        return run(name, input, root = root, dim = d, signature = sig(CollectiveOp.Gather, input, root = root, dim = d)) {
            if (rank == root) {
                val out = allocateOutput(input.dtype, shape)
                val blocks = if (outer == 1L) out.address else temp(out.byteSize)
                group {
                    for (r in 0 until worldSize) {
                        val slot = blocks + r * input.byteSize
                        if (r == rank) {
                            cuda(runtime.memcpyAsync(slot, input.address, input.byteSize, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, stream), "memcpyAsync")
                        } else {
                            nccl(api.recv(slot, input.byteSize, BYTES, r, comm, stream), "ncclRecv")
                        }
                    }
                }
                if (outer != 1L) blocksToColumns(out.address, blocks, input.byteSize, outer)
                out
            } else {
                group { nccl(api.send(input.address, input.byteSize, BYTES, root, comm, stream), "ncclSend") }
                null
            }
        }
    }

    override suspend fun scatter(output: Tensor, input: Tensor?, root: Int, dim: Int) {
        val name = "scatter"
        val d = validator.scatter(output, input, root, rank, dim)
        val outer = outerCount(output.shape, d)
        run(name, output, root = root, dim = d, signature = sig(CollectiveOp.Scatter, output, root = root, dim = d)) {
            if (rank == root) {
                val src = input!!
                val chunk = output.byteSize
                val blocks = if (outer == 1L) src.address else temp(src.byteSize).also { columnsToBlocks(it, src.address, chunk, outer) }
                group {
                    for (r in 0 until worldSize) {
                        val slot = blocks + r * chunk
                        if (r == rank) {
                            cuda(runtime.memcpyAsync(output.address, slot, chunk, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, stream), "memcpyAsync")
                        } else {
                            nccl(api.send(slot, chunk, BYTES, r, comm, stream), "ncclSend")
                        }
                    }
                }
            } else {
                group { nccl(api.recv(output.address, output.byteSize, BYTES, root, comm, stream), "ncclRecv") }
            }
        }
    }

    override suspend fun allToAll(input: Tensor, dim: Int): Tensor {
        val name = "allToAll"
        val d = validator.allToAll(input, dim)
        val outer = outerCount(input.shape, d)
        return run(name, input, dim = d, signature = sig(CollectiveOp.AllToAll, input, dim = d)) {
            val out = allocateOutput(input.dtype, input.shape)
            val chunk = input.byteSize / worldSize
            val sendBlocks = if (outer == 1L) input.address else temp(input.byteSize).also { columnsToBlocks(it, input.address, chunk, outer) }
            val recvBlocks = if (outer == 1L) out.address else temp(input.byteSize)
            group {
                for (r in 0 until worldSize) {
                    if (r == rank) {
                        cuda(runtime.memcpyAsync(recvBlocks + r * chunk, sendBlocks + r * chunk, chunk, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, stream), "memcpyAsync")
                    } else {
                        nccl(api.send(sendBlocks + r * chunk, chunk, BYTES, r, comm, stream), "ncclSend")
                        nccl(api.recv(recvBlocks + r * chunk, chunk, BYTES, r, comm, stream), "ncclRecv")
                    }
                }
            }
            if (outer != 1L) blocksToColumns(out.address, recvBlocks, chunk, outer)
            out
        }
    }

    // ---------------------------------------------------------------- uneven collectives
    //
    // Sizes count rows along dim 0 (Communicator.allGatherV). NCCL has no v-collectives; these follow
    // what PyTorch's ProcessGroupNCCL does for uneven sizes, each as one ncclGroupStart/ncclGroupEnd
    // group on this communicator's stream. Zero-row blocks issue nothing (every rank agrees on the
    // sizes, so every rank skips the same calls).

    private fun unevenSig(op: CollectiveOp, t: Tensor, shape: List<Int>, reduceOp: ReduceOp?, extra: Long): LongArray =
        LongArray(CollectiveSignature.SIZE).also { CollectiveSignature.encodeShape(it, 0, op, t.dtype, shape, reduceOp, extra = extra) }

    override suspend fun allGatherV(input: Tensor, sizes: List<Int>): Tensor {
        val name = "allGatherV"
        val shape = validator.allGatherVShape(input, sizes, rank)
        return run(name, input, signature = unevenSig(CollectiveOp.AllGatherV, input, shape, null, CollectiveSignature.sizesDigest(sizes))) {
            val out = allocateOutput(input.dtype, shape)
            issueAllGatherV(out, input, sizes)
            out
        }
    }

    override suspend fun allGatherVInto(output: Tensor, input: Tensor, sizes: List<Int>): Tensor {
        val name = "allGatherV"
        validator.allGatherVInto(output, input, sizes, rank)
        return run(name, input, signature = unevenSig(CollectiveOp.AllGatherV, input, output.shape, null, CollectiveSignature.sizesDigest(sizes))) {
            issueAllGatherV(output, input, sizes)
            output
        }
    }

    override suspend fun reduceScatterV(input: Tensor, sizes: List<Int>, op: ReduceOp): Tensor {
        val name = "reduceScatterV"
        val shape = validator.reduceScatterVShape(input, sizes, op, rank)
        val red = checkOp(op, input.dtype, name)
        return run(name, input, op = op, signature = unevenSig(CollectiveOp.ReduceScatterV, input, input.shape, op, CollectiveSignature.sizesDigest(sizes))) {
            val out = allocateOutput(input.dtype, shape)
            withRedOp(op, input, red) { r -> issueReduceScatterV(out, input, sizes, r) }
            out
        }
    }

    override suspend fun reduceScatterVInto(output: Tensor, input: Tensor, sizes: List<Int>, op: ReduceOp): Tensor {
        val name = "reduceScatterV"
        validator.reduceScatterVInto(output, input, sizes, op, rank)
        val red = checkOp(op, input.dtype, name)
        return run(name, input, op = op, signature = unevenSig(CollectiveOp.ReduceScatterV, input, input.shape, op, CollectiveSignature.sizesDigest(sizes))) {
            withRedOp(op, input, red) { r -> issueReduceScatterV(output, input, sizes, r) }
            output
        }
    }

    override suspend fun allToAllV(input: Tensor, inputSplits: List<Int>, outputSplits: List<Int>): Tensor {
        val name = "allToAllV"
        val shape = validator.allToAllVShape(input, inputSplits, outputSplits)
        return run(name, input, signature = unevenSig(CollectiveOp.AllToAllV, input, rowShape(input), null, 0L), splits = inputSplits to outputSplits) {
            val out = allocateOutput(input.dtype, shape)
            issueAllToAllV(out, input, inputSplits, outputSplits)
            out
        }
    }

    override suspend fun allToAllVInto(output: Tensor, input: Tensor, inputSplits: List<Int>, outputSplits: List<Int>): Tensor {
        val name = "allToAllV"
        validator.allToAllVInto(output, input, inputSplits, outputSplits)
        return run(name, input, signature = unevenSig(CollectiveOp.AllToAllV, input, rowShape(input), null, 0L), splits = inputSplits to outputSplits) {
            issueAllToAllV(output, input, inputSplits, outputSplits)
            output
        }
    }

    private fun rowShape(t: Tensor): List<Int> = t.shape.toMutableList().also { it[0] = -1 }

    /**
     * Every rank's [value] in rank order. Objects live on the host, so the common protocol
     * ([ObjectProtocol]: lengths first, checked, then the padded payloads) moves their JSON bytes
     * through temporary device buffers on this communicator's stream ([objects]: the only host
     * staging this class does).
     */
    override suspend fun <T> allGatherObject(value: T, serializer: KSerializer<T>): List<T> =
        ObjectProtocol.allGather(this, objects, value, serializer)

    /** [root]'s [value] on every rank, moved as for [allGatherObject]. */
    override suspend fun <T> broadcastObject(value: T?, root: Int, serializer: KSerializer<T>): T =
        ObjectProtocol.broadcast(this, objects, value, root, serializer)

    /** On [root], every rank's [value]; moved as for [allGatherObject] (a grouped ncclSend/ncclRecv gather of the padded bytes). */
    override suspend fun <T> gatherObject(value: T, root: Int, serializer: KSerializer<T>): List<T>? =
        ObjectProtocol.gather(this, objects, value, root, serializer)

    /** Element `rank` of [root]'s [values]; moved as for [allGatherObject] (a grouped ncclSend/ncclRecv scatter of the padded bytes). */
    override suspend fun <T> scatterObject(values: List<T>?, root: Int, serializer: KSerializer<T>): T =
        ObjectProtocol.scatter(this, objects, values, root, serializer)

    /**
     * Sends [value] to [dst] (tag 0 only) as two messages, length then bytes, each staged through a
     * device buffer and sent in a group of its own: unlike [send], each message completes only
     * when [dst] receives it and holds this device's thread meanwhile, so order object exchanges
     * between two ranks (one sends first, the other receives first).
     */
    override suspend fun <T> sendObject(value: T, dst: Int, tag: Int, serializer: KSerializer<T>) {
        ObjectProtocol.send(this, objects, value, dst, tag, serializer)
    }

    /** Receives what [sendObject] sent from [src] (tag 0 or ANY_TAG; no ANY_SOURCE); see there. */
    override suspend fun <T> recvObject(src: Int, tag: Int, serializer: KSerializer<T>): T =
        ObjectProtocol.recv(this, objects, src, tag, serializer)

    /**
     * The core's [MonitoredBarrier] over the staged object messages ([objects]' `sendLength`/`recvLength`,
     * tag 0, recorded as `monitoredBarrier`). NCCL matches messages between two ranks by issue order only
     * and has no wildcards, so no user receive can take them out of order. A receive holds the device's
     * thread until it matched, so rank 0 receives in rank order, names the first missing rank, and aborts
     * (`ncclCommAbort`) before it could answer the others: they fail through NCCL or their own deadline.
     */
    override suspend fun monitoredBarrier(timeout: kotlin.time.Duration, waitAllRanks: Boolean) {
        MonitoredBarrier.run(this, control, timeout, waitAllRanks)
    }

    private val control = object : MonitoredBarrierChannel {
        override val errors: CommunicationErrors get() = this@NcclCommunicator.errors
        override val concurrentReceives: Boolean get() = false
        override val callTimeout: kotlin.time.Duration get() = config.timeout

        override suspend fun send(value: Long, dst: Int) {
            objects.sendLength(MonitoredBarrier.OPERATION, value, dst, 0)
        }

        override suspend fun recv(src: Int): Long = objects.recvLength(MonitoredBarrier.OPERATION, src, 0).first

        override fun ensureUsable() {
            if (closed.get()) throw errors.aborted(MonitoredBarrier.OPERATION, CommunicationErrors.NO_SEQUENCE, "the communicator was closed; create a new one")
            failures.ensureUsable(MonitoredBarrier.OPERATION, CommunicationErrors.NO_SEQUENCE)
        }

        override fun abort(cause: CommunicationException) {
            this@NcclCommunicator.abort(cause)
        }
    }

    /** The object collectives' bytes, staged through temporary device buffers on this communicator's stream. */
    private val objects = object : ObjectTransport {
        override suspend fun allGatherLength(operation: String, length: Long): LongArray =
            allGather(operation, longBytes(length)).map { longsOf(it)[0] }.toLongArray()

        override suspend fun broadcastLengths(operation: String, lengths: LongArray, root: Int): LongArray =
            longsOf(broadcast(operation, longBytes(*lengths), root))

        override suspend fun sendLength(operation: String, length: Long, dst: Int, tag: Int) {
            send(operation, longBytes(length), dst, tag)
        }

        override suspend fun recvLength(operation: String, src: Int, tag: Int): Pair<Long, MessageInfo> =
            recv(operation, 8, src, tag).let { (bytes, info) -> longsOf(bytes)[0] to info }

        override suspend fun allGather(operation: String, bytes: ByteArray): List<ByteArray> {
            val all = stagedAllGather(operation, bytes)
            return List(worldSize) { r -> all.copyOfRange(r * bytes.size, (r + 1) * bytes.size) }
        }

        override suspend fun broadcast(operation: String, bytes: ByteArray, root: Int): ByteArray = stagedBroadcast(operation, bytes, root)

        override suspend fun gather(operation: String, bytes: ByteArray, root: Int): List<ByteArray>? = run(operation, null, root = root) {
            val n = bytes.size.toLong()
            val dev = temp(n * worldSize)
            val seg = staging(n * worldSize)
            MemorySegment.copy(bytes, 0, seg, ValueLayout.JAVA_BYTE, rank * n, bytes.size)
            cuda(runtime.memcpyAsync(dev + rank * n, seg.address() + rank * n, n, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, stream), "memcpyAsync")
            group {
                if (rank == root) {
                    for (r in 0 until worldSize) if (r != rank) nccl(api.recv(dev + r * n, n, BYTES, r, comm, stream), "ncclRecv")
                } else {
                    nccl(api.send(dev + rank * n, n, BYTES, root, comm, stream), "ncclSend")
                }
            }
            if (rank == root) cuda(runtime.memcpyAsync(seg.address(), dev, n * worldSize, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, stream), "memcpyAsync")
            awaitStream(this)
            if (rank == root) List(worldSize) { r -> seg.asSlice(r * n, n).toArray(ValueLayout.JAVA_BYTE) } else null
        }

        override suspend fun scatter(operation: String, rows: List<ByteArray>?, size: Int, root: Int): ByteArray = run(operation, null, root = root) {
            val n = size.toLong()
            val dev = temp(n * worldSize)
            val seg = staging(n * worldSize)
            if (rank == root) {
                for ((r, row) in rows!!.withIndex()) MemorySegment.copy(row, 0, seg, ValueLayout.JAVA_BYTE, r * n, row.size)
                cuda(runtime.memcpyAsync(dev, seg.address(), n * worldSize, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, stream), "memcpyAsync")
            }
            group {
                if (rank == root) {
                    for (r in 0 until worldSize) if (r != rank) nccl(api.send(dev + r * n, n, BYTES, r, comm, stream), "ncclSend")
                } else {
                    nccl(api.recv(dev + rank * n, n, BYTES, root, comm, stream), "ncclRecv")
                }
            }
            cuda(runtime.memcpyAsync(seg.address(), dev + rank * n, n, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, stream), "memcpyAsync")
            awaitStream(this)
            seg.asSlice(0, n).toArray(ValueLayout.JAVA_BYTE)
        }

        override suspend fun send(operation: String, bytes: ByteArray, dst: Int, tag: Int) {
            checkObjectPeer(operation, dst, tag, sending = true)
            run(operation, null, peer = dst) {
                thread.p2pOwner?.endP2pWindow()
                val n = bytes.size.toLong()
                val dev = temp(n)
                val seg = staging(n)
                MemorySegment.copy(bytes, 0, seg, ValueLayout.JAVA_BYTE, 0, bytes.size)
                cuda(runtime.memcpyAsync(dev, seg.address(), n, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, stream), "memcpyAsync")
                group { nccl(api.send(dev, n, BYTES, dst, comm, stream), "ncclSend") }
                awaitStream(this)
            }
        }

        override suspend fun recv(operation: String, size: Int, src: Int, tag: Int): Pair<ByteArray, MessageInfo> {
            checkObjectPeer(operation, src, tag, sending = false)
            val bytes = run(operation, null, peer = src) {
                thread.p2pOwner?.endP2pWindow()
                val n = size.toLong()
                val dev = temp(n)
                val seg = staging(n)
                group { nccl(api.recv(dev, n, BYTES, src, comm, stream), "ncclRecv") }
                cuda(runtime.memcpyAsync(seg.address(), dev, n, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, stream), "memcpyAsync")
                awaitStream(this)
                seg.asSlice(0, n).toArray(ValueLayout.JAVA_BYTE)
            }
            return bytes to MessageInfo(src, 0, size.toLong())
        }
    }

    private suspend fun stagedAllGather(name: String, bytes: ByteArray): ByteArray = run(name, null) {
        val n = bytes.size.toLong()
        val seg = staging(n * worldSize)
        MemorySegment.copy(bytes, 0, seg, ValueLayout.JAVA_BYTE, 0, bytes.size)
        val dev = temp(n * worldSize)
        cuda(runtime.memcpyAsync(dev + rank * n, seg.address(), n, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, stream), "memcpyAsync")
        nccl(api.allGather(dev + rank * n, dev, n, BYTES, comm, stream), "ncclAllGather")
        cuda(runtime.memcpyAsync(seg.address(), dev, n * worldSize, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, stream), "memcpyAsync")
        awaitStream(this)
        seg.asSlice(0, n * worldSize).toArray(ValueLayout.JAVA_BYTE)
    }

    private suspend fun stagedBroadcast(name: String, bytes: ByteArray, root: Int): ByteArray = run(name, null, root = root) {
        val n = bytes.size.toLong()
        val seg = staging(n)
        MemorySegment.copy(bytes, 0, seg, ValueLayout.JAVA_BYTE, 0, bytes.size)
        val dev = temp(n)
        if (rank == root) cuda(runtime.memcpyAsync(dev, seg.address(), n, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, stream), "memcpyAsync")
        nccl(api.broadcast(dev, dev, n, BYTES, root, comm, stream), "ncclBroadcast")
        cuda(runtime.memcpyAsync(seg.address(), dev, n, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, stream), "memcpyAsync")
        awaitStream(this)
        seg.asSlice(0, n).toArray(ValueLayout.JAVA_BYTE)
    }

    /** What [checkP2p] refuses of a peer and tag, for the object messages (which have no tensor). */
    private fun checkObjectPeer(operation: String, peer: Int, tag: Int, sending: Boolean) {
        require(tag == 0 || (!sending && tag == Communicator.ANY_TAG)) {
            "$operation: tag $tag is not supported by $backendName: NCCL matches messages between two ranks by order only; pass tag 0"
        }
        require(peer != Communicator.ANY_SOURCE) { "$operation: $backendName cannot receive from ANY_SOURCE (NCCL needs the sender's rank); pass the sender's rank" }
        require(peer != rank) { "$operation: rank $rank cannot ${if (sending) "send to" else "receive from"} itself on $backendName" }
    }

    override suspend fun barrier() {
        run("barrier", null, signature = sig(CollectiveOp.Barrier, null)) {
            if (scratch == 0L) {
                val p = LongArray(1)
                cuda(runtime.mallocAsync(p, 4, stream), "mallocAsync")
                scratch = p[0]
            }
            nccl(api.allReduce(scratch, scratch, 1, NcclDataType.INT32, NcclRedOp.SUM, comm, stream), "ncclAllReduce")
        }
    }

    override suspend fun send(tensor: Tensor, dst: Int, tag: Int) {
        val name = "send"
        checkP2p(tensor, dst, tag, name, sending = true)
        run(name, tensor, peer = dst, p2p = true) {
            nccl(api.send(tensor.address, tensor.byteSize, BYTES, dst, comm, stream), "ncclSend")
        }
    }

    override suspend fun recv(tensor: Tensor, src: Int, tag: Int): MessageInfo {
        val name = "recv"
        checkP2p(tensor, src, tag, name, sending = false)
        run(name, tensor, peer = src, p2p = true) {
            nccl(api.recv(tensor.address, tensor.byteSize, BYTES, src, comm, stream), "ncclRecv")
        }
        return MessageInfo(src, 0, tensor.byteSize)
    }

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
     * Issues every send and receive of [ops] as **one** NCCL group, in the given order, and returns
     * when all of them completed (the [Communicator.sendRecv] contract): the exact way to write any
     * exchange whose transfers must progress together, as PyTorch's `batch_isend_irecv`. Separate
     * [send]/[recv] calls are only grouped when they arrive within a few milliseconds of each other
     * (docs/gpu.md); a batch does not depend on timing. Tags must be 0 (a receive may say
     * [Communicator.ANY_TAG]), peers explicit ranks other than this one. Every element is checked
     * first (the common validator, then as [send] or [recv] checks it: [IllegalArgumentException],
     * nothing issued); the whole batch is one `sendRecv` operation in the flight record; failure and
     * cancellation as for a collective.
     */
    override suspend fun sendRecv(ops: List<PointToPoint>): List<MessageInfo> {
        val name = "sendRecv"
        validator.sendRecv(ops)
        for ((i, o) in ops.withIndex()) checkP2p(o.tensor, o.peer, o.tag, CollectiveValidator.sendRecvElement(i, o), sending = o.isSend)
        if (ops.isEmpty()) return emptyList()
        val first = ops.first()
        run(name, first.tensor, peer = first.peer) {
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
        run("waitEvent", null, onStream = false) {
            cuda(runtime.streamWaitEvent(stream, event), "streamWaitEvent")
        }
    }

    /** Not available: NCCL and RCCL cannot look at a message before receiving it. Always throws [UnsupportedOperationException]. */
    override suspend fun probe(src: Int, tag: Int): MessageInfo =
        throw UnsupportedOperationException(
            "probe: $backendName cannot inspect a message before receiving it; send the size first (e.g. a one-element Int64 tensor), then the payload",
        )

    override suspend fun split(color: Int?, key: Int): Communicator? {
        val name = "split"
        require(color == null || color >= 0) { "$name: color must be >= 0, or null to opt out; got $color" }
        return run(name, null, onStream = false) {
            // Nothing may be in flight on the parent during ncclCommSplit: drain its stream first
            // (on this thread, so no later call of this device's communicators is issued meanwhile).
            awaitStream(this)
            // The child appears in the cell only when NCCL's background job completes the split
            // (NVIDIA/nccl src/init.cc:3098-3099 sets *newcomm = NULL, 1959-1961 stores the child),
            // so the cell lives until the parent leaves ncclInProgress; after a failure or timeout it
            // is left allocated (8 bytes), since the aborted job may still write it.
            val cell = Arena.ofShared()
            val out = cell.allocate(ValueLayout.JAVA_LONG)
            out.set(ValueLayout.JAVA_LONG, 0, 0L)
            val code = api.commSplit(comm, color ?: NcclVersion.SPLIT_NOCOLOR, key, out, commConfig)
            if (code != NcclResult.IN_PROGRESS) nccl(code, "ncclCommSplit")
            // A non-blocking ncclCommSplit returns ncclSuccess while its job still builds the child: the
            // trailing NCCLCHECK(ncclGroupEndInternal()) lets ncclInProgress pass (NVIDIA/nccl src/init.cc
            // ncclCommSplit, src/include/checks.h NCCLCHECK; docs/nccl-semantics.md N4). So whatever it
            // returned, wait until the parent leaves ncclInProgress (the job is linked to the parent:
            // src/group.cc ncclAsyncLaunch / ncclGroupEndInternal), then until the job stored the child
            // (ncclCommInitRankFunc stores *newcomm at its end; PyTorch's NCCLComm::split also waits for it).
            waitReady(comm, "ncclCommSplit", this)
            var child = out.get(ValueLayout.JAVA_LONG, 0)
            if (color != null && child == 0L) {
                val backoff = Backoff.forLibraryThread()
                while (child == 0L) {
                    timedOut?.let { throw it }
                    failedWith()?.let { cause -> throw errors.abortedBy(name, entry.sequence, cause) }
                    backoff.idle()
                    child = out.get(ValueLayout.JAVA_LONG, 0)
                }
            }
            cell.close()
            if (child == 0L) {
                null
            } else {
                checkAsync(child, this)
                val counts = IntArray(1)
                nccl(api.commCount(child, counts), "ncclCommCount")
                val ranks = IntArray(1)
                nccl(api.commUserRank(child, ranks), "ncclCommUserRank")
                val s = LongArray(1)
                cuda(runtime.streamCreateNonBlocking(s), "streamCreateWithFlags")
                // The child shares this native thread: one launch order per device (SharedDispatcher).
                NcclCommunicator(
                    api, runtime, thread.retain(), child, s[0], ranks[0], counts[0], device, backendName,
                    config.copy(worldSize = counts[0], rank = ranks[0], localRank = config.localRank),
                    libraryVersionCode, commConfig,
                )
            }
        }
    }

    /**
     * Releases the communicator: waits (up to [CommConfig.timeout]) for the calls already queued,
     * then `ncclCommDestroy` (or `ncclCommAbort` after a failure), destroys the stream and events and
     * ends the native thread. Calls still in flight fail with [CommunicatorAbortedException].
     * Idempotent; later calls throw [CommunicatorAbortedException].
     */
    override fun close() {
        if (!closed.compareAndSet(false, true)) return
        recorder.close()
        deadlineWatch.close()
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
                if (!commReleased.get()) releaseComm(abort = true)
            }
        }
        if (done.count == 0L) thread.release(timeoutNanos) // a thread still blocked is left running (daemon) rather than joined forever
        runCatching { onClose?.close() }
    }

    override fun toString(): String = "NcclCommunicator($backendName rank $rank of $worldSize on $device)"

    // ---------------------------------------------------------------- machinery

    /**
     * One operation, from the call to its completion. Created on the caller's thread with its
     * deadline and the producer stream of the moment; the rest is touched on the native thread.
     */
    private inner class Op(val name: String, val deadline: Long, val producer: Long) {
        /** Completed by the native thread, or exceptionally by the watchdog at the deadline (first wins). */
        val result = CompletableDeferred<Any?>()
        @Volatile lateinit var entry: FlightRecorder.Entry
        val started: Boolean get() = ::entry.isInitialized
        var job: Job? = null
        @Volatile var issued = false
        @Volatile var finished = false
        val temps = ArrayList<Long>()
        /** Outputs this operation allocated; their frees are registered once it completed (after a failure the device may still write them). */
        val outputs = ArrayList<Pair<Tensor, Long>>()

        /** Set by the watchdog ([checkDeadlines]) when the deadline passed; the native thread throws it at its next poll. */
        @Volatile var timedOut: CommunicationTimeoutException? = null

        fun nccl(code: Int, call: String) {
            when (code) {
                NcclResult.SUCCESS -> Unit
                NcclResult.IN_PROGRESS -> waitReady(comm, call, this)
                else -> throw fail(this, ncclError(code, call, this))
            }
        }

        fun cuda(code: Int, call: String) {
            if (code != DeviceRuntime.SUCCESS) throw fail(this, runtimeError(code, call, this))
        }

        /** A stream-ordered temporary (`cudaMallocAsync`), freed with `cudaFreeAsync` after the call. */
        fun temp(bytes: Long): Long {
            val p = LongArray(1)
            cuda(runtime.mallocAsync(p, bytes.coerceAtLeast(1), stream), "mallocAsync")
            temps += p[0]
            return p[0]
        }

        /**
         * Runs [body] with the `ncclRedOp_t` of [op] for [tensor]'s dtype: [builtin] ([checkOp]'s code) as
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
                if (!commReleased.get()) api.redOpDestroy(handle[0], comm) // the call's own failure is what the caller sees
                throw t
            }
            if (!commReleased.get()) nccl(api.redOpDestroy(handle[0], comm), "ncclRedOpDestroy")
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
            if (thread.groupDepth == 0 && failedWith() != null && !commReleased.get()) releaseComm(abort = true)
            if (error != null) throw error
            nccl(end, "ncclGroupEnd")
        }

        /**
         * Opens (once) the group that point-to-point calls of this communicator issued back to back
         * share. NCCL's group is per host thread (docs/nccl-semantics.md N10), so another
         * communicator's open window on this device's thread is ended first.
         */
        fun openP2p(sending: Boolean) {
            val owner = thread.p2pOwner
            if (owner != null && owner !== this@NcclCommunicator) owner.endP2pWindow()
            if (thread.p2pOwner == null) {
                nccl(api.groupStart(), "ncclGroupStart")
                thread.groupDepth++
                thread.p2pOwner = this@NcclCommunicator
                thread.p2pOpenedAt = System.nanoTime()
                thread.p2pSends = false
                thread.p2pRecvs = false
            }
            if (sending) thread.p2pSends = true else thread.p2pRecvs = true
        }

        /** Makes this communicator's stream wait for the work queued on the op's producer stream so far (unless [NO_PRODUCER_STREAM]). */
        fun orderAfterProducer() {
            if (producer == NO_PRODUCER_STREAM) return
            if (producerEvent == 0L) {
                val e = LongArray(1)
                cuda(runtime.eventCreateDisableTiming(e), "eventCreateWithFlags")
                producerEvent = e[0]
            }
            cuda(runtime.eventRecord(producerEvent, producer), "eventRecord(producerStream)")
            cuda(runtime.streamWaitEvent(stream, producerEvent), "streamWaitEvent")
        }

        /** Page-locked host memory of at least [bytes] (the communicator's one staging buffer, grown on demand). */
        fun staging(bytes: Long): MemorySegment {
            if (pinnedBytes < bytes) {
                // The old buffer may still be read by copies queued before: free it stream-ordered... cudaFreeHost
                // synchronises, so it is kept until close instead; only growth allocates.
                if (pinned != 0L) retiredPinned += pinned
                val p = LongArray(1)
                cuda(runtime.hostAlloc(p, bytes.coerceAtLeast(64)), "hostAlloc")
                pinned = p[0]
                pinnedBytes = bytes.coerceAtLeast(64)
            }
            return MemorySegment.ofAddress(pinned).reinterpret(pinnedBytes)
        }

        fun allocateOutput(dtype: DType, shape: List<Int>): Tensor {
            val bytes = shape.fold(1L) { a, d -> a * d } * dtype.byteSize
            val p = LongArray(1)
            cuda(runtime.mallocAsync(p, bytes.coerceAtLeast(1), stream), "mallocAsync")
            val t = Tensor.wrapDevice(device, p[0], dtype, *shape.toIntArray())
            outputs += t to p[0]
            return t
        }

        /** `count` contiguous blocks of `outer` rows of `rowBytes` each, at [blocks], into the columns of [dst]. */
        fun blocksToColumns(dst: Long, blocks: Long, blockBytes: Long, outer: Long) {
            val row = blockBytes / outer
            for (r in 0 until worldSize) {
                cuda(
                    runtime.memcpy2DAsync(dst + r * row, row * worldSize, blocks + r * blockBytes, row, row, outer, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, stream),
                    "memcpy2DAsync",
                )
            }
        }

        /** The inverse of [blocksToColumns]: column block `r` of [src] into contiguous block `r` at [blocks]. */
        fun columnsToBlocks(blocks: Long, src: Long, blockBytes: Long, outer: Long) {
            val row = blockBytes / outer
            for (r in 0 until worldSize) {
                cuda(
                    runtime.memcpy2DAsync(blocks + r * blockBytes, row, src + r * row, row * worldSize, row, outer, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, stream),
                    "memcpy2DAsync",
                )
            }
        }

        /**
         * checkConsistency (only when set to true: off by default on the GPU engine, since it waits
         * for the stream before each collective): all-gathers every rank's signature of this call
         * (staged through device memory) and fails with [CollectiveMismatchException] naming the
         * differing ranks and fields.
         */
        fun checkSignature(sig: LongArray) {
            val n = sig.size * 8L
            val seg = staging(n * worldSize)
            MemorySegment.copy(sig, 0, seg, ValueLayout.JAVA_LONG, rank * n, sig.size)
            val dev = temp(n * worldSize)
            cuda(runtime.memcpyAsync(dev + rank * n, seg.address() + rank * n, n, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, stream), "memcpyAsync")
            nccl(api.allGather(dev + rank * n, dev, n, BYTES, comm, stream), "ncclAllGather")
            cuda(runtime.memcpyAsync(seg.address(), dev, n * worldSize, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, stream), "memcpyAsync")
            awaitStream(this)
            val all = LongArray(sig.size * worldSize) { i -> seg.getAtIndex(ValueLayout.JAVA_LONG, i.toLong()) }
            val mismatch = CollectiveSignature.compare(all, worldSize, entry.sequence, "a $backendName communicator of $worldSize ranks") ?: return
            entry.fail(RuntimeException(mismatch.message))
            throw fail(this, errors.mismatch(name, entry.sequence, mismatch))
        }

        /** Along the normalised dim [d]. */
        fun issueAllGather(out: Tensor, input: Tensor, d: Int) {
            val outer = outerCount(input.shape, d)
            val type = moveType(input)
            if (outer == 1L) {
                nccl(api.allGather(input.address, out.address, moveCount(input, type), type, comm, stream), "ncclAllGather")
            } else {
                val blocks = temp(out.byteSize)
                nccl(api.allGather(input.address, blocks, moveCount(input, type), type, comm, stream), "ncclAllGather")
                blocksToColumns(out.address, blocks, input.byteSize, outer)
            }
        }

        /**
         * allGatherV as PyTorch's ProcessGroupNCCL::allgather does for outputs of different sizes: one
         * out-of-place ncclBroadcast per rank (root r sends its input into rows `prefix[r]` of every
         * rank's output), coalesced into one group.
         */
        fun issueAllGatherV(out: Tensor, input: Tensor, sizes: List<Int>) {
            val rowBytes = input.stride(0) * input.dtype.byteSize
            group {
                var at = 0L
                for (r in 0 until worldSize) {
                    val bytes = sizes[r] * rowBytes
                    // NCCL reads sendbuff on the root only; elsewhere it is given the receive slice
                    // (an in-place broadcast there), so no rank passes a range its input does not hold.
                    val send = if (r == rank) input.address else out.address + at
                    if (bytes > 0) nccl(api.broadcast(send, out.address + at, bytes, BYTES, r, comm, stream), "ncclBroadcast")
                    at += bytes
                }
            }
        }

        /**
         * reduceScatterV as PyTorch's ProcessGroupNCCL::reduce_scatter does for outputs of different
         * sizes: one out-of-place ncclReduce per rank (rows `prefix[r]` of every input reduced into
         * rank r's output), coalesced into one group. The receive buffer matters on the root only.
         */
        fun issueReduceScatterV(out: Tensor, input: Tensor, sizes: List<Int>, red: Int) {
            val rowElements = input.stride(0)
            val esize = input.dtype.byteSize
            group {
                var at = 0L
                for (r in 0 until worldSize) {
                    val count = sizes[r] * rowElements
                    // recvbuff matters on the root only; elsewhere the send slice is given (an in-place
                    // reduce there, which NCCL does not write on non-roots), so no rank passes a range its
                    // output does not hold.
                    val send = input.address + at * esize
                    if (count > 0) nccl(api.reduce(send, if (r == rank) out.address else send, count, dt(input), red, r, comm, stream), "ncclReduce")
                    at += count
                }
            }
        }

        /**
         * allToAllV as PyTorch's torch::cuda::nccl::all2all_single_unequal_split
         * (torch/csrc/cuda/nccl.cpp, behind ProcessGroupNCCL::alltoall_base with split sizes): one
         * group of ncclSend/ncclRecv per peer, skipping empty blocks; the block to and from this rank
         * is a device copy, as in [allToAll].
         */
        fun issueAllToAllV(out: Tensor, input: Tensor, inputSplits: List<Int>, outputSplits: List<Int>) {
            val rowBytes = input.stride(0) * input.dtype.byteSize
            group {
                var sendAt = 0L
                var recvAt = 0L
                for (r in 0 until worldSize) {
                    val sendBytes = inputSplits[r] * rowBytes
                    val recvBytes = outputSplits[r] * rowBytes
                    if (r == rank) {
                        if (sendBytes > 0) cuda(runtime.memcpyAsync(out.address + recvAt, input.address + sendAt, sendBytes, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, stream), "memcpyAsync")
                    } else {
                        if (sendBytes > 0) nccl(api.send(input.address + sendAt, sendBytes, BYTES, r, comm, stream), "ncclSend")
                        if (recvBytes > 0) nccl(api.recv(out.address + recvAt, recvBytes, BYTES, r, comm, stream), "ncclRecv")
                    }
                    sendAt += sendBytes
                    recvAt += recvBytes
                }
            }
        }

        /**
         * allToAllV's split check (with checkConsistency): every rank's inputSplits all-gathered (staged
         * as [checkSignature] stages its words), so each rank sees what its peers send it and puts
         * [CollectiveSignature.splitsWord] into [sig]'s extra word before the signatures are compared.
         */
        fun completeSplitsWord(sig: LongArray, inputSplits: List<Int>, outputSplits: List<Int>) {
            val n = 8L * worldSize
            val seg = staging(n * worldSize)
            for (j in 0 until worldSize) seg.setAtIndex(ValueLayout.JAVA_LONG, rank.toLong() * worldSize + j, inputSplits[j].toLong())
            val dev = temp(n * worldSize)
            cuda(runtime.memcpyAsync(dev + rank * n, seg.address() + rank * n, n, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, stream), "memcpyAsync")
            nccl(api.allGather(dev + rank * n, dev, n, BYTES, comm, stream), "ncclAllGather")
            cuda(runtime.memcpyAsync(seg.address(), dev, n * worldSize, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, stream), "memcpyAsync")
            awaitStream(this)
            val sentToMe = IntArray(worldSize) { j -> seg.getAtIndex(ValueLayout.JAVA_LONG, j.toLong() * worldSize + rank).toInt() }
            sig[7] = CollectiveSignature.splitsWord(sentToMe, outputSplits)
        }

        /** Along the normalised dim [d]. */
        fun issueReduceScatter(out: Tensor, input: Tensor, red: Int, d: Int) {
            val outer = outerCount(input.shape, d)
            val src = if (outer == 1L) input.address else temp(input.byteSize).also { columnsToBlocks(it, input.address, out.byteSize, outer) }
            nccl(api.reduceScatter(src, out.address, out.numel, dt(input), red, comm, stream), "ncclReduceScatter")
        }
    }

    private suspend fun <T> run(
        name: String,
        tensor: Tensor?,
        root: Int = FlightRecorder.NONE,
        peer: Int = FlightRecorder.NONE,
        op: ReduceOp? = null,
        dim: Int = FlightRecorder.NONE,
        onStream: Boolean = true,
        signature: LongArray? = null,
        p2p: Boolean = false,
        splits: Pair<List<Int>, List<Int>>? = null,
        issue: Op.() -> T,
    ): T {
        if (closed.get()) {
            throw errors.aborted(name, -1, "the communicator was closed; create a new one")
        }
        // The deadline runs from the call (docs/gpu.md, "Deadlines"): the watchdog times the operation
        // while it waits for the native thread too, and releases this caller at the deadline.
        val o = Op(name, System.nanoTime() + timeoutNanos, producerStream)
        live.add(o)
        val native = scope.launch {
            o.job = coroutineContext[Job]
            try {
                @Suppress("UNCHECKED_CAST")
                o.result.complete(onNative(o, tensor, root, peer, op, dim, onStream, signature, p2p, splits, issue as Op.() -> Any?))
            } catch (e: Throwable) {
                o.result.completeExceptionally(e)
            } finally {
                live.remove(o)
            }
        }
        try {
            @Suppress("UNCHECKED_CAST")
            return o.result.await() as T
        } catch (e: CancellationException) {
            // The operation itself may end in a CancellationException (its thread closed): only the caller's own cancellation aborts here.
            if (currentCoroutineContext()[Job]?.isCancelled != true) throw e
            native.cancel(e)
            live.remove(o)
            if (o.issued && !o.finished) abortForCancellation(name, e)
            throw e
        }
    }

    /** The native thread's part of [run]: flight record, order after the producer, signature, issue, completion, frees. */
    private suspend fun onNative(
        o: Op,
        tensor: Tensor?,
        root: Int,
        peer: Int,
        op: ReduceOp?,
        dim: Int,
        onStream: Boolean,
        signature: LongArray?,
        p2p: Boolean,
        splits: Pair<List<Int>, List<Int>>?,
        issue: Op.() -> Any?,
    ): Any? {
        o.timedOut?.let { throw it }
        val entry = recorder.start(o.name, tensor?.dtype, tensor?.shape, tensor?.byteSize ?: 0, root = root, peer = peer, reduceOp = op, dim = dim)
        o.entry = entry
        failedWith()?.let { cause ->
            val e = errors.abortedBy(o.name, entry.sequence, cause)
            entry.fail(e)
            throw e
        }
        o.issued = true
        inFlight++
        try {
            // Any point-to-point window open on this device's thread (this communicator's or another's)
            // ends before anything else is issued: NCCL's group is per thread (docs/nccl-semantics.md N10).
            val owner = thread.p2pOwner
            if (owner != null && (!p2p || owner !== this)) owner.endP2pWindow()
            o.orderAfterProducer()
            if (signature != null && config.checkConsistency == true && worldSize > 1) {
                if (splits != null) o.completeSplitsWord(signature, splits.first, splits.second)
                o.checkSignature(signature)
            }
            if (p2p) o.openP2p(sending = o.name == "send")
            val result = o.issue()
            if (p2p) {
                // Calls queued behind this one join the open group. It ends once this thread's queue is
                // drained and the group holds both directions (a send and a receive: the exchange that must
                // progress together), or P2P_GRACE_NANOS after it opened, or when another call comes.
                var polls = 0
                dispatcher.await(NativeRequest {
                    when {
                        thread.p2pOwner !== this -> true
                        polls++ == 0 -> false
                        (thread.p2pSends && thread.p2pRecvs) || System.nanoTime() - thread.p2pOpenedAt > P2P_GRACE_NANOS -> { endP2pWindow(); true }
                        else -> false
                    }
                })
            }
            if (onStream) {
                val event = acquireEvent(o)
                o.cuda(runtime.eventRecord(event, stream), "eventRecord")
                dispatcher.await(completion(o, event))
                events.addLast(event)
            }
            // Stream-ordered frees: never cudaFree/hipFree (a device synchronisation) on this thread.
            for (p in o.temps) runtime.freeAsync(p, stream)
            for ((t, p) in o.outputs) CLEANER.register(t, DeviceFree(runtime, thread, deviceIndex, stream, p, o.producer))
            o.finished = true
            entry.complete()
            return result
        } catch (e: CancellationException) {
            abortForCancellation(o.name, e)
            throw e
        } catch (e: CommunicationException) {
            entry.fail(e)
            throw e
        } catch (e: Throwable) {
            val wrapped = errors.failure(o.name, entry.sequence, "unexpected failure while issuing: $e", e)
            throw fail(o, wrapped)
        } finally {
            inFlight--
        }
    }

    /**
     * Ends this communicator's point-to-point window (the open group on the device's thread) and
     * waits until the library accepted it; a failure aborts this communicator, whose calls in the
     * window then fail. Called by any communicator of the thread that must issue something else
     * first (native thread only).
     */
    internal fun endP2pWindow() {
        if (thread.p2pOwner !== this) return
        thread.p2pOwner = null
        val end = api.groupEnd()
        thread.groupDepth--
        if (failedWith() != null) {
            if (!commReleased.get()) releaseComm(abort = true)
            return
        }
        var state = end
        val backoff = Backoff.forLibraryThread()
        while (state == NcclResult.IN_PROGRESS) {
            // The calls in the window are timed by the watchdog: a timeout aborts this communicator.
            if (failedWith() != null) return
            state = api.asyncState(comm, status)
            if (state == NcclResult.IN_PROGRESS) backoff.idle()
        }
        if (state != NcclResult.SUCCESS) {
            val text = runCatching { api.getErrorString(state) }.getOrNull()
            abort(
                errors.nativeError(
                    "send/recv", -1,
                    "ncclGroupEnd of the point-to-point calls failed: ${NcclResult.name(state)} ($state)" + (text?.let { ": $it" } ?: "") +
                        ". ${NcclResult.hint(state)}. The communicator was aborted.",
                    state,
                ),
            )
        }
    }

    private fun completion(op: Op, event: Long): NativeRequest = NativeRequest {
        op.timedOut?.let { throw it }
        failedWith()?.let { cause -> throw errors.abortedBy(op.name, op.entry.sequence, cause) }
        when (val q = runtime.eventQuery(event)) {
            DeviceRuntime.SUCCESS -> {
                // A kernel that gave up on a failed peer also lets the event complete: check before reporting success.
                checkAsync(comm, op)
                return@NativeRequest true
            }
            DeviceRuntime.ERROR_NOT_READY -> Unit
            else -> throw fail(op, runtimeError(q, "eventQuery", op))
        }
        checkAsync(comm, op)
        false
    }

    /** Spins on the native thread until [handle] leaves `ncclInProgress` (non-blocking init, split, enqueue). */
    private fun waitReady(handle: Long, call: String, op: Op, alsoAbort: Long = 0L) {
        // NCCL finishes a non-blocking call on a thread of its own (src/group.cc:825-857): yield to it rather than sleep.
        val backoff = Backoff.forLibraryThread()
        while (true) {
            op.timedOut?.let { e ->
                if (alsoAbort != 0L && alsoAbort != comm) api.commAbort(alsoAbort)
                throw e
            }
            failedWith()?.let { cause -> throw errors.abortedBy(op.name, op.entry.sequence, cause) }
            when (val state = api.asyncState(handle, status)) {
                NcclResult.SUCCESS -> return
                NcclResult.IN_PROGRESS -> Unit
                else -> {
                    if (alsoAbort != 0L && alsoAbort != comm) api.commAbort(alsoAbort)
                    throw fail(op, ncclError(state, call, op))
                }
            }
            // The deadline is the watchdog's (checkDeadlines): op.timedOut above.
            backoff.idle()
        }
    }

    /** Waits on the native thread (inside an operation) until the stream's work so far is done; used only by the object collectives. */
    private fun awaitStream(op: Op) {
        val event = acquireEvent(op)
        op.cuda(runtime.eventRecord(event, stream), "eventRecord")
        val request = completion(op, event)
        val backoff = Backoff.forLibraryThread()
        while (!request.poll()) {
            // Blocking here keeps the issue order of the communicator's calls; a cancelled caller still gets out.
            if (op.job?.isActive == false) throw CancellationException("${op.name} was cancelled while waiting for the device")
            op.timedOut?.let { throw it }
            backoff.idle()
        }
        events.addLast(event)
    }

    private fun checkAsync(handle: Long, op: Op) {
        val state = api.asyncState(handle, status)
        if (state != NcclResult.SUCCESS && state != NcclResult.IN_PROGRESS) {
            throw fail(op, ncclError(state, "ncclCommGetAsyncError", op))
        }
    }

    private fun acquireEvent(op: Op): Long {
        events.pollFirst()?.let { return it }
        val e = LongArray(1)
        op.cuda(runtime.eventCreateDisableTiming(e), "eventCreateWithFlags")
        allEvents += e[0]
        return e[0]
    }

    /** A call of [operation] in flight was cancelled: its peers cannot finish it without this rank, so the communicator is aborted (unless it already failed). */
    private fun abortForCancellation(operation: String, cause: CancellationException) {
        if (failedWith() != null) return
        abort(
            errors.aborted(
                operation, CommunicationErrors.NO_SEQUENCE,
                "a $operation call in flight was cancelled (${cause.message}); the other ranks cannot finish it, so the communicator was aborted",
                cause,
            ),
        )
    }

    /** Marks [op] failed with [error], aborts the communicator, and returns [error] for throwing. */
    private fun fail(op: Op, error: CommunicationException): CommunicationException {
        op.entry.fail(error)
        abort(error)
        return error
    }

    /**
     * First failure wins: records it and calls `ncclCommAbort`. On the native thread inside an open
     * group the abort waits for the group's end ([Op.group]): NCCL would only carry it out at
     * `ncclGroupEnd` (NVIDIA/nccl `src/init.cc`:3035-3060, `ncclCommAbort` runs inside
     * `ncclGroupStartInternal`/`ncclGroupEndInternal`). From any other thread it is queued on the
     * native thread and, when that thread does not take it within [ABORT_GRACE_MS] (it is blocked in
     * a library call), called right away from a separate thread, as PyTorch's watchdog calls
     * `ncclCommAbort` while the issuing thread is blocked (pytorch/pytorch
     * `torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp`, `ProcessGroupNCCL::abortCommsFromMap`, called from the
     * heartbeat/watchdog thread): NCCL's abort flag makes the blocked call return.
     */
    private fun abort(cause: CommunicationException) {
        if (!failures.abort(cause)) return
        recorder.recordAbort(cause)
        if (dispatcher.isNativeThread) {
            releaseAfterGroups()
            return
        }
        thread.runOnThread(Runnable { releaseAfterGroups() })
        AbortEscalation.after("tpcomm-$backendName-abort", ABORT_GRACE_MS) {
            if (!commReleased.get() && !dispatcher.isClosed) releaseComm(abort = true)
        }
    }

    /**
     * On the native thread: `ncclCommAbort` once no group is open on it. This communicator's own
     * point-to-point window is ended first (ending it releases the communicator), another's too
     * (an abort inside it would join that group: docs/nccl-semantics.md N12); inside an [Op.group]
     * body the abort waits for the group's end, which releases it.
     */
    private fun releaseAfterGroups() {
        thread.p2pOwner?.endP2pWindow()
        if (thread.groupDepth == 0) releaseComm(abort = true)
    }

    private fun releaseComm(abort: Boolean) {
        if (!commReleased.compareAndSet(false, true)) return
        if (abort) {
            api.commAbort(comm)
            return
        }
        // ncclCommFinalize first, polled to success, then ncclCommDestroy (NVIDIA/nccl
        // docs/userguide/source/usage/communicators.rst:330-350; init.cc:2783 ncclCommFinalize). If it
        // fails or does not finish within the timeout, abort instead; nothing touches comm afterwards.
        var code = api.commFinalize(comm)
        if (code == NcclResult.IN_PROGRESS) {
            val deadline = System.nanoTime() + timeoutNanos
            val backoff = Backoff.forLibraryThread()
            while (true) {
                code = api.asyncState(comm, status)
                if (code != NcclResult.IN_PROGRESS || System.nanoTime() - deadline > 0) break
                backoff.idle()
            }
        }
        if (code == NcclResult.SUCCESS) api.commDestroy(comm) else api.commAbort(comm)
    }

    private fun nativeClose() {
        val busy = inFlight > 0
        failures.abort(errors.closed())
        // A window open on the device's thread (this communicator's or another's) ends first: a
        // finalize or abort issued inside it would join that group (docs/nccl-semantics.md N10, N12).
        thread.p2pOwner?.endP2pWindow()
        val healthy = !busy && failedWith()?.operation == "close"
        releaseComm(abort = !healthy)
        if (scratch != 0L) runtime.freeAsync(scratch, stream)
        scratch = 0L
        if (producerEvent != 0L) runtime.eventDestroy(producerEvent)
        producerEvent = 0L
        // Page-locked memory is freed only when the device is known idle (cudaFreeHost synchronises);
        // after a failure the device may still write it, so it is left to the process.
        if (healthy) (retiredPinned + pinned).filter { it != 0L }.forEach { runtime.freeHost(it) }
        pinned = 0L
        retiredPinned.clear()
        for (e in allEvents) runtime.eventDestroy(e)
        allEvents.clear()
        events.clear()
        // Outputs of this communicator still alive are freed on its stream later: it is destroyed with the device's thread.
        thread.retireStream(stream)
    }

    // ---------------------------------------------------------------- validation and errors

    private fun checkP2p(t: Tensor, peer: Int, tag: Int, name: String, sending: Boolean) {
        if (sending) validator.send(t, peer, tag) else validator.recv(t, peer, tag)
        if (sending) {
            require(tag == 0) { "$name: tag $tag is not supported by $backendName: NCCL matches messages between two ranks by order only; pass tag 0" }
            require(peer != rank) { "$name: rank $rank cannot send to itself on $backendName (a lone ncclSend to oneself never completes); copy on the device instead" }
        } else {
            require(peer != Communicator.ANY_SOURCE) { "$name: $backendName cannot receive from ANY_SOURCE (NCCL needs the sender's rank); pass the sender's rank" }
            require(tag == 0 || tag == Communicator.ANY_TAG) {
                "$name: tag $tag is not supported by $backendName: NCCL matches messages between two ranks by order only; pass tag 0 or ANY_TAG"
            }
            require(peer != rank) { "$name: rank $rank cannot receive from itself on $backendName; copy on the device instead" }
        }
    }

    /**
     * What NCCL/RCCL reduce, checked before any data moves; returns the `ncclRedOp_t` code. Bool is
     * reduced as uint8 with max (Sum, Max: a logical or) and min (Product, Min: a logical and), as
     * PyTorch's `getNcclReduceOp` does; Int16 has no NCCL type; FP8 needs NCCL 2.24 and the OCP
     * formats (not RCCL's FNUZ ones).
     * Returns -1 for [ReduceOp.PreMulSum], whose operator [Op.withRedOp] creates per call on the
     * native thread (after the same dtype checks).
     */
    private fun checkOp(op: ReduceOp, dtype: DType, operation: String): Int {
        CollectiveChecks.op(op, dtype, operation)
        if (op is ReduceOp.PreMulSum) return -1
        val code = NcclRedOp.of(op)
        requireNotNull(code) {
            "$operation: $op is not supported by $backendName: ${api.libraryName} has no bitwise reductions; " +
                "use the mpi or local backend for bitwise ops, or Sum/Product/Min/Max/Avg" +
                (if (dtype == DType.Bool) " (on Bool, Sum or Max is a logical or, Product or Min a logical and)" else "")
        }
        require(NcclDataType.of(dtype) != null) {
            "$operation: $backendName cannot reduce $dtype: ${api.libraryName} has no ${dtype.name.lowercase()} type; " +
                "convert the tensor to Int32 (exact for every $dtype value) and reduce that, or use the mpi or local backend " +
                "(data movement such as broadcast and allGather carries $dtype as it is)"
        }
        if (dtype == DType.Float8E4M3 || dtype == DType.Float8E5M2) {
            require(api.float8IsOcp) {
                "$operation: $backendName cannot reduce $dtype: ${api.libraryName}'s 8-bit float types are not the OCP formats tpcomm's $dtype holds " +
                    "(RCCL's are AMD's FNUZ variants on MI300); convert to Float16 or BFloat16 and reduce, or use the mpi or local backend"
            }
            require(libraryVersionCode >= NcclDataType.FLOAT8_VERSION) {
                "$operation: $backendName cannot reduce $dtype: ${api.libraryName} ${NcclVersion.format(libraryVersionCode)} has no " +
                    "8-bit float types (ncclFloat8e4m3/ncclFloat8e5m2 need NCCL 2.24 or later); convert to Float16 or BFloat16 and reduce, or upgrade"
            }
        }
        if (dtype == DType.Bool) {
            return if (op == ReduceOp.Product || op == ReduceOp.Min) NcclRedOp.MIN else NcclRedOp.MAX
        }
        if (op == ReduceOp.Avg) {
            require(libraryVersionCode >= NcclVersion.AVG_AND_BFLOAT16) {
                "$operation: Avg needs ${api.libraryName} 2.10 or later, this is ${NcclVersion.format(libraryVersionCode)}; use Sum and divide, or upgrade"
            }
        }
        return code
    }

    private fun ncclError(code: Int, call: String, op: Op): NcclException {
        val text = runCatching { api.getErrorString(code) }.getOrNull()
        val last = runCatching { api.getLastError(comm) }.getOrNull()?.takeIf { it.isNotBlank() }
        val message = "$call failed: ${NcclResult.name(code)} ($code)" + (text?.let { ": $it" } ?: "") + (last?.let { " — $it" } ?: "") +
            ". ${NcclResult.hint(code)}. The communicator was aborted."
        op.entry.fail(RuntimeException(message))
        return errors.nativeError(op.name, op.entry.sequence, message, code)
    }

    private fun runtimeError(code: Int, call: String, op: Op): NcclException {
        val text = runCatching { runtime.getErrorString(code) }.getOrNull()
        val message = "${runtime.platformName} $call failed with error $code" + (text?.let { ": $it" } ?: "") + ". The communicator was aborted."
        op.entry.fail(RuntimeException(message))
        return errors.nativeError(op.name, op.entry.sequence, message, code, isRuntimeError = true)
    }

    private fun timeoutError(op: Op): CommunicationTimeoutException {
        if (!op.started) {
            // Queued behind a native thread blocked in a library call: the deadline still runs from the call.
            val message = "did not start within ${config.timeout}: the device's native thread was blocked in a library call the whole time " +
                "(another call of this device's communicators is stuck); the communicator was aborted with ncclCommAbort"
            return errors.timeout(op.name, -1, message)
        }
        val message = "did not complete within ${config.timeout} (a rank never arrived, or the device is stuck); " +
            "the communicator was aborted with ncclCommAbort"
        op.entry.fail(RuntimeException(message))
        return errors.timeout(op.name, op.entry.sequence, message)
    }


    /** The `ncclDataType_t` a reduction of [t] uses; [checkOp] refused the dtypes without one. */
    private fun dt(t: Tensor): Int = NcclDataType.of(t.dtype) ?: throw IllegalStateException("${t.dtype} has no NCCL type; checkOp refuses it")

    /** The type data movement uses: [t]'s own where this library has it, else bytes ([moveCount] then counts bytes). */
    private fun moveType(t: Tensor): Int =
        NcclDataType.of(t.dtype)?.takeIf { libraryVersionCode >= NcclDataType.minimumVersion(t.dtype) } ?: BYTES

    /** The element count for [type]: bytes when [moveType] fell back to bytes. */
    private fun moveCount(t: Tensor, type: Int): Long = if (type == BYTES) t.byteSize else t.numel

    public companion object {
        /**
         * The legacy default stream (`cudaStreamLegacy` used as handle 0, HIP's null stream): the
         * default [producerStream]. It waits for all earlier work of the device's blocking streams, and
         * they wait for it (docs/nccl-semantics.md C11).
         */
        public const val LEGACY_DEFAULT_STREAM: Long = 0L

        /** [producerStream] value that opts out of ordering with the caller's stream. */
        public const val NO_PRODUCER_STREAM: Long = -1L

        /** Point-to-point messages move bytes (`ncclUint8`), so any dtypes of equal byte size match. */
        private const val BYTES = NcclDataType.UINT8

        private fun longBytes(vararg values: Long): ByteArray =
            java.nio.ByteBuffer.allocate(8 * values.size).also { b -> values.forEach { b.putLong(it) } }.array()

        private fun longsOf(bytes: ByteArray): LongArray = java.nio.ByteBuffer.wrap(bytes).let { b -> LongArray(bytes.size / 8) { b.getLong() } }
        private val CLEANER: Cleaner = Cleaner.create()

        /** How long an abort from another thread waits for the native thread before calling `ncclCommAbort` itself. */
        private const val ABORT_GRACE_MS = 100L

        /**
         * How long a group of point-to-point calls in one direction stays open for the opposite call
         * (the receive of a ring step issued right after its send) before it is issued alone.
         */
        private const val P2P_GRACE_NANOS = 5_000_000L

        /** This call's signature in the core's one encoding ([CollectiveSignature]); [dim] is the validator's normalised one (-1: none). */
        private fun sig(operation: CollectiveOp, t: Tensor?, op: ReduceOp? = null, root: Int = -1, dim: Int = -1): LongArray =
            CollectiveSignature.of(operation, t, op, root, dim)

        private fun outerCount(shape: List<Int>, d: Int): Long {
            var o = 1L
            for (i in 0 until d) o *= shape[i]
            return o
        }
    }

    /**
     * Frees an output's device memory once its tensor is unreachable, ordered after the work queued
     * on [consumer] (the producer stream of the call that made it, the stream the caller reads
     * outputs on) by then: on the device's native thread, an event on [consumer] that [stream] waits
     * for, then `cudaFreeAsync` on [stream] (kept alive until the thread ends). Without that order
     * the pool could hand the block to the next allocation while a kernel still reads it (PyTorch's
     * `recordStream` exists for this; docs/nccl-semantics.md C7). After the thread ended, from the
     * Cleaner thread with the tensor's device made current, `cudaFreeAsync` on [consumer] itself.
     */
    private class DeviceFree(
        val runtime: DeviceRuntime,
        val thread: DeviceThread,
        val device: Int,
        val stream: Long,
        val ptr: Long,
        val consumer: Long,
    ) : Runnable {
        override fun run() {
            val onThread = thread.runOnThread(Runnable {
                if (consumer != NO_PRODUCER_STREAM) {
                    val e = LongArray(1)
                    if (runtime.eventCreateDisableTiming(e) == DeviceRuntime.SUCCESS) {
                        runtime.eventRecord(e[0], consumer)
                        runtime.streamWaitEvent(stream, e[0])
                        runtime.eventDestroy(e[0]) // released by the runtime once the recorded work completed
                    }
                }
                runtime.freeAsync(ptr, stream)
            })
            if (!onThread) {
                runtime.setDevice(device)
                runtime.freeAsync(ptr, if (consumer == NO_PRODUCER_STREAM) LEGACY_DEFAULT_STREAM else consumer)
            }
        }
    }

}

internal fun deviceIndex(device: Device): Int = when (device) {
    is Device.Cuda -> device.index
    is Device.Rocm -> device.index
    Device.Host -> throw IllegalArgumentException("a GPU communicator needs a GPU device, got $device")
}
