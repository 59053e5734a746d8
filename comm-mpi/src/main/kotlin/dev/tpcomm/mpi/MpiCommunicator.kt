package dev.tpcomm.mpi

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.Communicator
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.Device
import dev.tpcomm.MessageInfo
import dev.tpcomm.PointToPoint
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.Backoff
import dev.tpcomm.coroutines.CommunicatorFront
import dev.tpcomm.coroutines.OperationFailure
import dev.tpcomm.coroutines.OperationFailedSignal
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.coroutines.NativeDispatcher
import dev.tpcomm.coroutines.callerMayBeHeld
import dev.tpcomm.coroutines.NativeDispatcherClosedException
import dev.tpcomm.spi.CollectiveOp
import dev.tpcomm.spi.CollectiveValidator
import dev.tpcomm.spi.CommunicationErrors
import dev.tpcomm.spi.MonitoredBarrier
import dev.tpcomm.spi.MonitoredBarrierChannel
import kotlinx.coroutines.CoroutineDispatcher
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.Job
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.TimeoutCancellationException
import kotlinx.coroutines.currentCoroutineContext
import kotlinx.coroutines.ensureActive
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.suspendCancellableCoroutine
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.lang.ref.Reference
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicBoolean
import kotlin.coroutines.EmptyCoroutineContext
import kotlin.coroutines.cancellation.CancellationException

/**
 * A [Communicator] over an MPI communicator (a duplicate of `MPI_COMM_WORLD`, or one made by
 * [split]/[group] with `MPI_Comm_split`), created by [MpiBackendFactory].
 *
 * **Threading.** Every MPI call of this communicator runs on one [NativeDispatcher] thread
 * ([nativeDispatcher]), in call order, so every rank issues its collectives in program order.
 * With `MPI_THREAD_MULTIPLE` ([MpiThreadLevel.Multiple], the default) each communicator, split
 * ones included, has its own thread, so collectives on different communicators never wait for one
 * another. With [MpiThreadLevel.Single] or [MpiThreadLevel.Serialized] all communicators of the
 * process share one MPI thread (MPI is cheaper per call without thread support, see
 * [MpiThreadLevel.Single]): blocking collectives on different
 * communicators then run one after the other, so every rank must issue them in the same order
 * (as in PyTorch's MPI process group), or use [MpiProgress.NonBlocking], whose operations progress
 * together. Callers already on [nativeDispatcher] (`withContext(comm.nativeDispatcher) { ... }`)
 * skip the thread hop: the small-message fast path.
 *
 * **Progress.** With [MpiProgress.Blocking] (the default while [MpiConfig.abortOnTimeout] is on)
 * collectives are blocking MPI calls on that thread, as fast as C; the caller's coroutine is
 * suspended meanwhile and compute elsewhere overlaps. With [MpiProgress.NonBlocking] they are
 * `MPI_I*` calls polled with `MPI_Test` by the dispatcher's progress loop, several in flight at
 * once. Point-to-point calls are always non-blocking, so concurrent sends and receives never
 * deadlock.
 *
 * **Failure.** Arguments are checked first, on every path, device tensors included (the core's
 * validator: the same [IllegalArgumentException] as on every backend, for heap, read-only, closed
 * or aliased tensors, sizes past MPI's int count, tags past [tagUpperBound]), before a device
 * tensor is staged or any MPI call is made. MPI errors (the communicator uses
 * `MPI_ERRORS_RETURN`) become [CommunicationException]s carrying MPI's error string. A call past
 * [CommConfig.timeout] raises [CommunicationTimeoutException] with the flight recorder's dump (also
 * printed to stderr), aborts the communicator ([isAborted]), and with [MpiConfig.abortOnTimeout]
 * calls `MPI_Abort` so that every rank of the job ends (the process ends itself if MPI does not).
 * A caller's own deadline (`withTimeout`, `awaitAll(timeout)`) raises
 * [CommunicationTimeoutException] at that deadline in every progress mode and aborts the
 * communicator. A mismatched collective (ranks calling different operations, dtypes, shapes, ops,
 * roots or dims) raises [CollectiveMismatchException] on every rank before any data moves: the
 * check is on unless [CommConfig.checkConsistency] is false; a peer's abort makes later calls throw
 * [CommunicatorAbortedException]. Tensors are retained while MPI may touch them (a `close()`
 * meanwhile is deferred); buffers of operations that failed while MPI may still touch them are
 * kept for the life of the process.
 *
 * **Device tensors.** CUDA tensors go to MPI as device pointers when the library is CUDA-aware
 * ([passesDevicePointers]). Other device tensors (MPI not CUDA-aware, [CudaAwareMode.Disabled], or
 * ROCm) are staged through host memory with the [dev.tpcomm.spi.DeviceStaging] that
 * [dev.tpcomm.spi.DeviceStagingRegistry] finds for their device (comm-nccl and comm-rccl offer one
 * when their GPU runtime is available): inputs are copied to host temporaries, the operation runs on
 * the host, outputs are copied back, and the temporaries are freed. [gather] and [allToAll] then
 * return host tensors. A failed copy to the host raises [CommunicationException] and aborts the
 * communicator; a failed copy back raises it and leaves the communicator usable. With no staging
 * for the device, such tensors are refused with [IllegalArgumentException] saying how to register
 * one. The caller must have waited for the device work that writes a tensor before passing it.
 *
 * Thread-safe. [close] is idempotent; the last MPI communicator to close calls `MPI_Finalize`.
 */
public class MpiCommunicator internal constructor(
    internal val runtime: MpiRuntime,
    internal val binding: MpiBinding,
    internal val handle: Long,
    /** A duplicate of [handle] carrying only abort notices between ranks ([MpiAbortNotices]). */
    private val controlHandle: Long,
    rank: Int,
    worldSize: Int,
    /** The configuration this communicator was created with. */
    public val config: CommConfig,
    /** The MPI settings in effect. */
    public val mpiConfig: MpiConfig,
    private val dispatcher: NativeDispatcher,
    /** False when [dispatcher] is the process's one MPI thread, shared below `MPI_THREAD_MULTIPLE`. */
    private val ownsDispatcher: Boolean,
    private val name: String,
    /**
     * The largest tag [send], [recv] and [probe] accept: the communicator's `MPI_TAG_UB` attribute
     * (MPICH 4.0 with ch4:ucx: 2^28 - 1; Open MPI 4.1: 2^31 - 1; at least 32767 by the standard).
     */
    public val tagUpperBound: Int = 32767,
) : CommunicatorFront(
    rank, worldSize, Device.Host, "mpi",
    FlightRecorder(
        config.flightRecorderSize, rank, "mpi", timing = mpiConfig.profiling, worldSize = worldSize, communicator = FlightRecorder.safeId(name), dumpDirectory = config.flightRecorderDir,
        // Without profiling, start times come from the watchdog's scans: no clock read per operation.
        clock = if (mpiConfig.profiling) FlightRecorder.NanoClock.SYSTEM else runtime.communicators.coarseClock,
    ),
    // The core's argument checks, run by the front first on host and device tensors alike (device
    // tensors go to a CUDA-aware MPI as pointers or are staged: anyDevice), so every backend refuses
    // the same mistake with the same message: heap, read-only (written), freed or closed tensors and
    // views of closed ones, sizes in Long past MPI's int count, tags past tagUpperBound, aliased
    // input and output. The run* bodies and MpiDeviceStaging check nothing of their own.
    CollectiveValidator(
        worldSize, Device.Host, nativeMemory = true, maxTag = tagUpperBound, maxCount = Int.MAX_VALUE.toLong(), anyDevice = true,
        // No device staging for the uneven collectives, and their counts and displacements are not given to a CUDA-aware MPI.
        unevenDeviceRefusal = { device ->
            "the MPI backend runs the uneven collectives on host tensors only, but a tensor is on $device; " +
                "copy it to the host first, or use the NCCL/RCCL backend"
        },
        // A device pointer given to a CUDA-aware MPI allows no host work around the call.
        deviceRefusal = hostWorkOf(binding, mpiConfig, runtime)::refusal,
    ),
    config.timeout,
) {
    internal val abi: MpiAbi = binding.abi
    private val blockingMode: Boolean = mpiConfig.effectiveProgress == MpiProgress.Blocking
    private val arena: Arena = Arena.ofShared()
    private val scratch: MemorySegment = arena.allocate(SCRATCH_BYTES, 64)
    private val scratchAddress = scratch.address()
    private val signatures = MpiSignatureProtocol(worldSize, arena, "an MPI communicator of $worldSize ranks")

    /** `CommConfig.checkConsistency`, on unless set to false: each collective's signature digest is exchanged first ([MpiSignatureProtocol]). */
    private val checksConsistency: Boolean = config.checkConsistency ?: true

    /**
     * Whether the consistency check's exchange carries small collectives ([MpiSlotPayload]): with
     * the check, in blocking progress only. There a rank whose exchange is inside MPI finishes its
     * call whatever its caller does (as it would run the operation after the check), so a peer
     * that finished from the slots never finished something this rank did not. In non-blocking
     * progress a cancelled caller abandons its exchange, and its peers must then wait for an
     * operation it never issues (and learn of its abort), not finish one from its slot.
     */
    private val slotsCarry: Boolean = checksConsistency && blockingMode
    private val stats = ConcurrentHashMap<String, MpiOpProfile.Accumulator>()
    private val deviceTensors: Boolean = passesDevicePointers(mpiConfig, runtime)

    private val workarounds = MpiWorkarounds(binding.abi)

    /**
     * Which device tensors go to MPI directly, and what runs on the host around MPI calls: for
     * [staging] and the run paths' guard (the validator refuses host work first, see the constructor).
     */
    private val hostWork = MpiHostWork(workarounds, deviceTensors)

    private val staging = MpiDeviceStaging(this, hostWork)


    private val notices = MpiAbortNotices(binding, controlHandle, rank, worldSize, arena, runtime::whileMpiOpen)

    // Written by the communicator's thread around each blocking call, read by the notice thread and
    // the shutdown message (is this rank blocked in MPI, and in what). The
    // sequence and operation are plain fields published by the release store of the call token,
    // so the fast path pays neither a full fence nor a clock read.
    private val activeCallCell = java.util.concurrent.atomic.AtomicLong(0L)
    private var callTokens: Long = 0L // native thread only

    private var currentSequence: Long = 0L

    private var currentOperation: String = ""

    /** Non-blocking operations of this communicator in flight (changed on its thread only). */
    @Volatile internal var inFlightOps: Int = 0

    /**
     * How the process's [MpiCommunicators] see this communicator. Not the communicator itself:
     * [programFailed] breaks it, so it must not be a public member a user could call.
     */
    private val watched = object : MpiCommunicators.Member {
        // An aborted communicator's leftover operations are abandoned (their peers were told);
        // only a usable communicator's operation in progress makes a shutdown a failure.
        override fun describeActiveCall(): String? = when {
            isAborted -> null
            activeCallCell.get() != 0L -> "$currentOperation #${this@MpiCommunicator.currentSequence} on $name"
            inFlightOps > 0 -> "$inFlightOps non-blocking operation(s) on $name"
            else -> null
        }
        override fun pollPeerNotices() {
            // Only where MPI allows a second thread; below MPI_THREAD_MULTIPLE the communicator's own
            // thread tests the notices before its calls.
            if (worldSize == 1 || !runtime.multiThreaded || isClosed || isAborted) return
            val from = notices.pollFromOtherThread()
            if (from >= 0) peerAborted(from, notices.reason)
        }
        override fun programFailed(description: String) {
            if (isClosed || isAborted) return
            markBroken(
                exceptionOf(OperationFailure.ABORTED, PROGRAM_FAILED, CommunicationErrors.NO_SEQUENCE, "the program of rank $rank failed: $description"),
                reason = MpiAbortNotices.REASON_PROGRAM_FAILED,
                now = true,
            )
        }
        override fun drain(untilNanos: Long): Boolean {
            if (dispatcher.isClosed || dispatcher.isNativeThread) return true
            val done = java.util.concurrent.CountDownLatch(1)
            dispatcher.dispatch(EmptyCoroutineContext, Runnable { done.countDown() })
            return done.await(maxOf(0L, untilNanos - System.nanoTime()), java.util.concurrent.TimeUnit.NANOSECONDS)
        }
    }

    init {
        runtime.communicators.register(watched)
    }

    /** The MPI implementation this process loaded. */
    public val implementation: MpiImplementation get() = runtime.implementation

    /** `MPI_Get_library_version`'s text. */
    public val libraryVersion: String get() = runtime.library.version

    /** Whether device (CUDA) tensors are handed to MPI directly (CUDA-aware MPI); when false they are staged through host memory. */
    public val passesDevicePointers: Boolean get() = deviceTensors

    /**
     * The communicator's thread as a coroutine dispatcher: code run in
     * `withContext(comm.nativeDispatcher)` calls MPI without a thread hop (hot loops of small messages).
     */
    public val nativeDispatcher: CoroutineDispatcher get() = dispatcher

    /** The flight recorder's JSON dump of recent operations. */
    public fun flightRecorderDump(): String = recorder.dumpJson()

    /**
     * Per-operation timing of the MPI calls (count, total and maximum), by operation name; empty
     * unless [MpiConfig.profiling] is on. The consistency check's exchange is `"<operation>(signature)"`;
     * a small all-reduce, broadcast or barrier finished from that exchange ([MpiSlotPayload]) makes
     * no other MPI call, so it appears under that name only. A snapshot; thread-safe.
     */
    public fun profile(): Map<String, MpiOpProfile> = stats.mapValues { it.value.snapshot() }

    // ------------------------------------------------------------------ what the front asks of MPI

    /**
     * The front recorded the communicator's failure [cause]: the process's MPI counts as broken, and
     * the peers are told with an abort notice ([markBroken]'s [detail]: whether, why, and whether at
     * once; an abort of the front's own tells them, as a failure).
     */
    override fun aborting(cause: Throwable, detail: Int) {
        runtime.broken = true
        val notify = detail == ABORT_FROM_FRONT || detail and NOTIFY_PEERS != 0
        if (!notify || worldSize == 1 || isClosed) return
        val reason = if (detail == ABORT_FROM_FRONT) MpiAbortNotices.REASON_FAILED else detail and REASON_MASK
        if (dispatcher.isNativeThread || (detail and NOTIFY_NOW != 0 && runtime.multiThreaded)) {
            notices.send(reason)
        } else {
            dispatcher.dispatch(EmptyCoroutineContext, Runnable { notices.send(reason) })
        }
    }

    /**
     * The small blocking all-reduces and broadcasts run to completion here, without suspending:
     * on this communicator's thread when the caller is on it (the fast path), or on the caller's
     * thread when [callerRuns] allows it for this size, the caller may be held
     * ([callerMayBeHeld]: no `withTimeout`, no [dev.tpcomm.coroutines.Overlapping]) and the
     * communicator's thread is idle ([NativeDispatcher.runHereIfIdle]: the natural call path).
     * Everything else runs in [await].
     */
    override fun issue(call: Call): Any? {
        if (!blockingMode) return PENDING
        val tensor = call.input ?: return PENDING
        return when (call.op) {
            CollectiveOp.AllReduce -> {
                val op = call.reduceOp!!
                if (staging.needed(tensor) || workarounds.hostReduced(tensor.dtype, op)) return PENDING
                if (runsHere(call, tensor) { allReduceBlocking(call, tensor, op) }) tensor else PENDING
            }
            CollectiveOp.Broadcast -> {
                if (staging.needed(tensor)) return PENDING
                if (runsHere(call, tensor) { broadcastBlocking(call, tensor, call.root) }) tensor else PENDING
            }
            else -> PENDING
        }
    }

    /** Runs [block] on this thread when [issue] may (see there): true when it ran. */
    private inline fun runsHere(call: Call, tensor: Tensor, crossinline block: () -> Unit): Boolean {
        if (fastPath()) {
            block()
            return true
        }
        if (!callerRuns || tensor.byteSize > mpiConfig.callerRunsLimit || !callerMayBeHeld(call.context)) return false
        return dispatcher.runHereIfIdle { block() }
    }

    /**
     * Runs what [issue] did not, after the front validated, recorded and retained it: on the
     * caller's thread, on this communicator's thread, or handed from one to the other
     * ([collective]). Device tensors MPI is not given directly go through [staging] (host
     * temporaries), the others straight to MPI.
     */
    override suspend fun await(call: Call): Any? {
        try {
            return run(call)
        } finally {
            // The caller's side of a hand-off ([collective]): its tensors are released once MPI is done too.
            (call.state as? MpiHandOff)?.callerLeft()
        }
    }

    /** [await]'s work: the operation's MPI calls, directly or through [staging]. */
    private suspend fun run(call: Call): Any? {
        val input = call.input
        val output = call.output
        val staged = staging.needed(input) || staging.needed(output)
        return when (call.op) {
            CollectiveOp.AllReduce ->
                if (staged) staging.allReduce(call, input!!, call.reduceOp!!) else runAllReduce(call, input!!, call.reduceOp!!)
            CollectiveOp.Broadcast ->
                if (staged) staging.broadcast(call, input!!, call.root) else runBroadcast(call, input!!, call.root)
            CollectiveOp.Reduce ->
                if (staged) staging.reduce(call, input!!, call.root, call.reduceOp!!) else runReduce(call, input!!, call.root, call.reduceOp!!)
            CollectiveOp.AllGather ->
                if (staged) staging.allGatherInto(call, output!!, input!!, call.dim) else runAllGather(call, output!!, input!!, call.dim)
            CollectiveOp.ReduceScatter ->
                if (staged) {
                    staging.reduceScatterInto(call, output!!, input!!, call.reduceOp!!, call.dim)
                } else {
                    runReduceScatter(call, output!!, input!!, call.reduceOp!!, call.dim)
                }
            // The root's output is the front's (a host tensor, also for a staged device input).
            CollectiveOp.Gather ->
                if (staging.needed(input)) staging.gather(call, input!!, call.root, call.dim, output) else runGather(call, input!!, call.root, call.dim, output)
            // The input is the root's only (the front passes null elsewhere).
            CollectiveOp.Scatter ->
                if (staged) staging.scatter(call, output!!, input, call.root, call.dim) else runScatter(call, output!!, input, call.root, call.dim)
            CollectiveOp.AllToAll ->
                if (staging.needed(input)) staging.allToAll(call, input!!, call.dim, output!!) else runAllToAll(call, input!!, call.dim, output!!)
            // Host tensors only: the validator refuses device ones (unevenDeviceRefusal).
            CollectiveOp.AllGatherV -> runAllGatherV(call, output!!, input!!, call.sizes!!)
            CollectiveOp.ReduceScatterV -> runReduceScatterV(call, output!!, input!!, call.sizes!!, call.reduceOp!!)
            CollectiveOp.AllToAllV -> runAllToAllV(call, output!!, input!!, call.sizes!!, call.outputSizes!!)
            CollectiveOp.Barrier -> runBarrier(call)
            CollectiveOp.Split -> {
                val e = call.extra as IntArray
                runSplit(call, if (e[0] == 0) null else e[1], e[2])
            }
            CollectiveOp.Group -> {
                val position = (call.extra as List<*>).indexOf(rank)
                runSplit(call, if (position >= 0) 0 else null, if (position >= 0) position else 0)
            }
            CollectiveOp.Duplicate -> runDuplicate(call)
            else -> error("${call.name} is not a collective of the front")
        }
    }

    /**
     * A send of the front's retained [tensor]: handed over ([MpiHandOff]) before it goes to the
     * communicator's thread, so that it stays retained while MPI may read it, also after its caller left.
     */
    override suspend fun issueSend(entry: FlightRecorder.Entry, tensor: Tensor, dst: Int, tag: Int) {
        val handOff = handOver(entry, tensor)
        try {
            if (staging.needed(tensor)) staging.send(entry, tensor, dst, tag, handOff) else runSend(entry, tensor, dst, tag, handOff)
        } finally {
            handOff.callerLeft()
        }
    }

    /** A receive into the front's retained [tensor], handed over as [issueSend]'s. */
    override suspend fun issueRecv(entry: FlightRecorder.Entry, tensor: Tensor, src: Int, tag: Int): MessageInfo {
        val handOff = handOver(entry, tensor)
        try {
            return if (staging.needed(tensor)) staging.recv(entry, tensor, src, tag, handOff) else runRecv(entry, tensor, src, tag, handOff)
        } finally {
            handOff.callerLeft()
        }
    }

    /** The hand-off of the front's retained [tensor] of the message recorded as [entry] ([handOverTensors]). */
    private fun handOver(entry: FlightRecorder.Entry, tensor: Tensor): MpiHandOff {
        handOverTensors(entry)
        return MpiHandOff(this, null, tensor)
    }

    // ------------------------------------------------------------------ collectives

    /** [allReduce] of a validated [tensor] MPI takes as it is (host memory or a CUDA-aware device pointer). */
    internal suspend fun runAllReduce(call: Call, tensor: Tensor, op: ReduceOp): Tensor {
        val name = call.name
        if (workarounds.hostReduced(tensor.dtype, op)) {
            hostWork.guard(CollectiveOp.AllReduce, op, 0, tensor)
            // The tensor is allReduce's output: PreMulSum scales it in place.
            val pre = preMul(op, tensor, inPlace = true)
            val n = mpiCount(tensor)
            val staging = Tensor.zeros(tensor.dtype, listOf(blocksCount(n, name, "the host reduction's staging buffer")))
            val src = addr(tensor); val dst = addr(staging); val t = abi.datatype(tensor.dtype)
            collective(call, sig(call), arrayOf(tensor, staging),
                { pre?.apply(); binding.allgather(src, n, t, dst, n, t, handle) },
                { r -> pre?.apply(); binding.iallgather(src, n, t, dst, n, t, handle, r) })
            HostReduction.reduceBlocks(staging.segment, worldSize, n.toLong(), tensor.dtype, op, tensor.segment)
            return tensor
        }
        if (fastPath()) {
            allReduceBlocking(call, tensor, op)
            return tensor
        }
        reduceInPlace(tensor, op) { pre, n, t, o, payload ->
            val buf = addr(tensor); val inPlace = abi.inPlace
            collective(call, sig(call), tensor,
                { pre?.apply(); binding.allreduce(inPlace, buf, n, t, o, handle) },
                { r -> pre?.apply(); binding.iallreduce(inPlace, buf, n, t, o, handle, r) },
                payload = payload)
        }
        return tensor
    }

    /**
     * An in-place reduction's steps around its MPI call: the checks of what runs on the host,
     * PreMulSum's scaling (applied by [call] on the thread that calls MPI), the unsigned-byte
     * workaround's flip and flip back, and Avg's division after the sum. [call] gets the scaling,
     * the count, MPI's datatype and op.
     */
    private inline fun reduceInPlace(
        tensor: Tensor, op: ReduceOp, call: (pre: PreMul?, n: Int, type: Long, mpiOp: Long, payload: MpiSlotPayload?) -> Unit,
    ) {
        hostWork.guard(CollectiveOp.AllReduce, op, 0, tensor)
        // The tensor is allReduce's output: PreMulSum scales it in place.
        val pre = preMul(op, tensor, inPlace = true)
        val n = mpiCount(tensor)
        val flip = workarounds.flipsUnsignedBytes(tensor, op)
        val mpiOp = abi.op(op, tensor.dtype)
        // Small enough to ride in the consistency check's exchange, reduced on the host as MPI would
        // be asked to (Avg as Sum, divided below); not with PreMulSum's per-rank scaling or the
        // flipped bytes, which only MPI's own reduction reads right.
        val payload = if (slotsCarry && pre == null && !flip && MpiSlotPayload.fits(tensor.byteSize)) {
            MpiSlotPayload.AllReduce(tensor, if (op == ReduceOp.Avg) ReduceOp.Sum else op)
        } else {
            null
        }
        if (flip) workarounds.flipTopBits(tensor)
        try {
            call(pre, n, workarounds.reduceType(tensor, op), mpiOp, payload)
        } finally {
            if (flip) workarounds.flipTopBits(tensor)
        }
        if (op == ReduceOp.Avg) HostReduction.divide(tensor.segment, tensor.dtype, tensor.numel, worldSize)
    }

    /** allReduce as one blocking MPI call on whichever thread owns MPI now (see [issue]). */
    private fun allReduceBlocking(call: Call, tensor: Tensor, op: ReduceOp) {
        reduceInPlace(tensor, op) { pre, n, t, o, payload ->
            val buf = addr(tensor); val inPlace = abi.inPlace
            inlineBlocking(call.entry, call.name, tensor, sig(call), payload = payload) { pre?.apply(); binding.allreduce(inPlace, buf, n, t, o, handle) }
        }
    }

    /** broadcast as one blocking MPI call on whichever thread owns MPI now (see [issue]). */
    private fun broadcastBlocking(call: Call, tensor: Tensor, root: Int) {
        val n = mpiCount(tensor)
        val buf = addr(tensor); val t = abi.datatype(tensor.dtype)
        inlineBlocking(call.entry, call.name, tensor, sig(call), payload = broadcastPayload(tensor, root)) { binding.bcast(buf, n, t, root, handle) }
    }

    /** [broadcast] of a validated [tensor] MPI takes as it is. */
    internal suspend fun runBroadcast(call: Call, tensor: Tensor, root: Int): Tensor {
        val name = call.name
        if (fastPath()) {
            broadcastBlocking(call, tensor, root)
            return tensor
        }
        val n = mpiCount(tensor)
        val buf = addr(tensor); val t = abi.datatype(tensor.dtype)
        collective(call, sig(call), tensor,
            { binding.bcast(buf, n, t, root, handle) },
            { r -> binding.ibcast(buf, n, t, root, handle, r) },
            payload = broadcastPayload(tensor, root))
        return tensor
    }

    /** A broadcast small enough to ride in the consistency check's exchange ([MpiSlotPayload.Broadcast]), or null. */
    private fun broadcastPayload(tensor: Tensor, root: Int): MpiSlotPayload? =
        if (slotsCarry && MpiSlotPayload.fits(tensor.byteSize)) MpiSlotPayload.Broadcast(tensor, root, rank) else null

    /** [reduce] of a validated [tensor] MPI takes as it is. */
    internal suspend fun runReduce(call: Call, tensor: Tensor, root: Int, op: ReduceOp): Tensor {
        val name = call.name
        hostWork.guard(CollectiveOp.Reduce, op, 0, tensor)
        val n = mpiCount(tensor)
        val t = abi.datatype(tensor.dtype)
        val sig = sig(call)
        // The root's tensor is the output (scaled in place); the other ranks' must stay unchanged.
        val pre = preMul(op, tensor, inPlace = rank == root)
        if (workarounds.hostReduced(tensor.dtype, op)) {
            val stagingCount = blocksCount(n, name, "the host reduction's staging buffer")
            val staging = if (rank == root) Tensor.zeros(tensor.dtype, listOf(stagingCount)) else null
            val entry = call.entry
            val src = addr(pre?.target ?: tensor); val dst = staging?.let { addr(it) } ?: 0L
            collective(call, sig, arrayOf(tensor, staging, pre?.target),
                { pre?.apply(); binding.gather(src, n, t, dst, n, t, root, handle) },
                { r -> pre?.apply(); binding.igather(src, n, t, dst, n, t, root, handle, r) })
            pre?.release()
            if (staging != null) HostReduction.reduceBlocks(staging.segment, worldSize, n.toLong(), tensor.dtype, op, tensor.segment)
            return tensor
        }
        val entry = call.entry
        val buf = addr(tensor); val o = abi.op(op, tensor.dtype)
        val send = if (rank == root) abi.inPlace else addr(pre?.target ?: tensor)
        val recv = if (rank == root) buf else 0L
        val flip = workarounds.flipsUnsignedBytes(tensor, op)
        val rt = workarounds.reduceType(tensor, op)
        if (flip) workarounds.flipTopBits(tensor)
        try {
            collective(call, sig, if (pre == null) tensor else arrayOf(tensor, pre.target),
                { pre?.apply(); binding.reduce(send, recv, n, rt, o, root, handle) },
                { r -> pre?.apply(); binding.ireduce(send, recv, n, rt, o, root, handle, r) })
        } finally {
            if (flip) workarounds.flipTopBits(tensor)
        }
        pre?.release()
        if (op == ReduceOp.Avg && rank == root) HostReduction.divide(tensor.segment, tensor.dtype, tensor.numel, worldSize)
        return tensor
    }

    /** [allGatherInto] of validated tensors MPI takes as they are, along the normalised dim [d]. */
    internal suspend fun runAllGather(call: Call, output: Tensor, input: Tensor, d: Int): Tensor {
        val name = call.name
        val n = mpiCount(input)
        val direct = contiguousAlong(input, d)
        hostWork.guard(CollectiveOp.AllGather, null, d, input)
        hostWork.guard(CollectiveOp.AllGather, null, d, output, layout = input)
        val staging = if (direct) output else Tensor.zeros(input.dtype, listOf(blocksCount(n, name, "the staging buffer")))
        val entry = call.entry
        val t = abi.datatype(input.dtype)
        val dst = addr(staging)
        // An input inside the output (PyTorch's in-place all_gather_into_tensor), on the host or on
        // one device, was refused by the validator: MPI forbids aliased buffers and MPICH checks it
        // (MPIR_ERRTEST_ALIAS_COLL, "Buffers must not be aliased"), which failed the call and
        // aborted the communicator.
        val src = addr(input)
        collective(call, sig(call), arrayOf(input, output, staging),
            { binding.allgather(src, n, t, dst, n, t, handle) },
            { r -> binding.iallgather(src, n, t, dst, n, t, handle, r) })
        if (!direct) scatterBlocksAlong(staging, input.shape, output, d)
        return output
    }

    /** [reduceScatterInto] of validated tensors MPI takes as they are, along the normalised dim [d]. */
    internal suspend fun runReduceScatter(call: Call, output: Tensor, input: Tensor, op: ReduceOp, d: Int): Tensor {
        val name = call.name
        val n = mpiCount(output)
        val direct = contiguousAlong(input, d)
        val half = workarounds.hostReduced(input.dtype, op)
        hostWork.guard(CollectiveOp.ReduceScatter, op, d, input)
        hostWork.guard(CollectiveOp.ReduceScatter, op, d, output, layout = input)
        val gathered = if (direct) input else gatherBlocksAlong(input, d)
        // The input is not the output: PreMulSum scales into a staging buffer (or the rearranged copy, ours).
        val pre = preMul(op, gathered, inPlace = gathered !== input)
        val send = pre?.target ?: gathered
        val t = abi.datatype(input.dtype)
        val sig = sig(call)
        val entry = call.entry
        if (half) {
            val blocks = Tensor.zeros(input.dtype, listOf(blocksCount(n, name, "the host reduction's staging buffer")))
            val src = addr(send); val dst = addr(blocks)
            collective(call, sig, arrayOf(input, send, blocks),
                { pre?.apply(); binding.alltoall(src, n, t, dst, n, t, handle) },
                { r -> pre?.apply(); binding.ialltoall(src, n, t, dst, n, t, handle, r) })
            pre?.release()
            HostReduction.reduceBlocks(blocks.segment, worldSize, n.toLong(), input.dtype, op, output.segment)
            return output
        }
        val src = addr(send); val dst = addr(output); val o = abi.op(op, input.dtype)
        val flip = workarounds.flipsUnsignedBytes(input, op)
        val rt = workarounds.reduceType(input, op)
        if (flip) workarounds.flipTopBits(send)
        try {
            collective(call, sig, arrayOf(input, send, output),
                { pre?.apply(); binding.reduceScatterBlock(src, dst, n, rt, o, handle) },
                { r -> pre?.apply(); binding.ireduceScatterBlock(src, dst, n, rt, o, handle, r) })
            pre?.release()
        } finally {
            if (flip) {
                if (send === input) workarounds.flipTopBits(input)
                workarounds.flipTopBits(output)
            }
        }
        if (op == ReduceOp.Avg) HostReduction.divide(output.segment, output.dtype, output.numel, worldSize)
        return output
    }

    /** [gather] of a validated [input] MPI takes as it is, along the normalised dim [d], into the root's [output] (null elsewhere). */
    internal suspend fun runGather(call: Call, input: Tensor, root: Int, d: Int, output: Tensor?): Tensor? {
        val name = call.name
        val n = mpiCount(input)
        val direct = contiguousAlong(input, d)
        hostWork.guard(CollectiveOp.Gather, null, d, input)
        val stagingCount = blocksCount(n, name, "the staging buffer")
        val staging = if (rank != root) null else if (direct) output else Tensor.zeros(input.dtype, listOf(stagingCount))
        val entry = call.entry
        val src = addr(input); val dst = staging?.let { addr(it) } ?: 0L; val t = abi.datatype(input.dtype)
        collective(call, sig(call), arrayOf(input, output, staging),
            { binding.gather(src, n, t, dst, n, t, root, handle) },
            { r -> binding.igather(src, n, t, dst, n, t, root, handle, r) })
        if (output != null && !direct) scatterBlocksAlong(staging!!, input.shape, output, d)
        return output
    }

    /**
     * [scatter] of validated tensors MPI takes as they are, along the normalised dim [d]: [input]
     * is the root's (null on the other ranks).
     */
    internal suspend fun runScatter(call: Call, output: Tensor, input: Tensor?, root: Int, d: Int) {
        val name = call.name
        val n = mpiCount(output)
        val direct = contiguousAlong(output, d)
        if (input != null) hostWork.guard(CollectiveOp.Scatter, null, d, input, layout = output)
        hostWork.guard(CollectiveOp.Scatter, null, d, output)
        val send = if (input == null) null else if (direct) input else gatherBlocksAlong(input, d)
        val entry = call.entry
        val src = send?.let { addr(it) } ?: 0L; val dst = addr(output); val t = abi.datatype(output.dtype)
        collective(call, sig(call), arrayOf(input, send, output),
            { binding.scatter(src, n, t, dst, n, t, root, handle) },
            { r -> binding.iscatter(src, n, t, dst, n, t, root, handle, r) })
    }

    /** [allToAll] of a validated [input] MPI takes as it is, along the normalised dim [d], into [output] (of [input]'s shape). */
    internal suspend fun runAllToAll(call: Call, input: Tensor, d: Int, output: Tensor): Tensor {
        val name = call.name
        val total = mpiCount(input)
        val n = total / worldSize
        val direct = contiguousAlong(input, d)
        hostWork.guard(CollectiveOp.AllToAll, null, d, input)
        val send = if (direct) input else gatherBlocksAlong(input, d)
        val recv = if (direct) output else Tensor.zeros(input.dtype, listOf(total))
        val entry = call.entry
        val src = addr(send); val dst = addr(recv); val t = abi.datatype(input.dtype)
        collective(call, sig(call), arrayOf(input, send, recv, output),
            { binding.alltoall(src, n, t, dst, n, t, handle) },
            { r -> binding.ialltoall(src, n, t, dst, n, t, handle, r) })
        if (!direct) {
            val chunkShape = input.shape.toMutableList().also { it[d] = it[d] / worldSize }
            scatterBlocksAlong(recv, chunkShape, output, d)
        }
        return output
    }

    // ------------------------------------------------------------------ uneven collectives
    //
    // Sizes count rows along dim 0 (Communicator.allGatherV); MPI gets element counts and
    // displacements as int arrays. The validator refuses a result above maxCount = Int.MAX_VALUE
    // elements ("64-bit counts"): every count and displacement (at most the output's or input's
    // element count) then fits MPI's int. Host tensors only (no device staging for these three).

    /** `int[]` arrays for MPI in one native tensor, kept alive with the call: [values] in order. */
    private fun intArrays(vararg values: IntArray): Tensor {
        val all = IntArray(values.sumOf { it.size })
        var at = 0
        for (v in values) { v.copyInto(all, at); at += v.size }
        return Tensor.of(all)
    }

    /** Element counts of [rows] rows of [rowElements] elements, and their prefix sums (displacements); within int by the validator. */
    private fun elementCounts(rows: List<Int>, rowElements: Long): Pair<IntArray, IntArray> {
        val counts = IntArray(worldSize) { Math.toIntExact(rows[it] * rowElements) }
        val displs = IntArray(worldSize)
        var at = 0L
        for (i in 0 until worldSize) { displs[i] = Math.toIntExact(at); at += counts[i] }
        return counts to displs
    }

    private suspend fun runAllGatherV(call: Call, output: Tensor, input: Tensor, sizes: List<Int>): Tensor {
        val name = call.name
        val (counts, displs) = elementCounts(sizes, input.stride(0))
        val meta = intArrays(counts, displs)
        val n = mpiCount(input)
        val t = abi.datatype(input.dtype)
        val src = addr(input); val dst = addr(output)
        val cAddr = addr(meta); val dAddr = cAddr + 4L * worldSize
        val sig = sig(call)
        val entry = call.entry
        collective(call, sig, arrayOf(input, output, meta),
            { binding.allgatherv(src, n, t, dst, cAddr, dAddr, t, handle) },
            { r -> binding.iallgatherv(src, n, t, dst, cAddr, dAddr, t, handle, r) })
        return output
    }

    private suspend fun runReduceScatterV(call: Call, output: Tensor, input: Tensor, sizes: List<Int>, op: ReduceOp): Tensor {
        val name = call.name
        val rowElements = input.stride(0)
        val (counts, displs) = elementCounts(sizes, rowElements)
        val n = mpiCount(output)
        val t = abi.datatype(input.dtype)
        val sig = sig(call)
        // The input is not the output: PreMulSum scales into a staging buffer.
        val pre = preMul(op, input, inPlace = false)
        val entry = call.entry
        if (workarounds.hostReduced(input.dtype, op)) {
            // As reduceScatter does for dtypes MPI cannot reduce: every rank's block for this rank
            // (n elements from each) arrives by MPI_Alltoallv, then the host reduces the blocks.
            val blocks = Tensor.zeros(input.dtype, listOf(blocksCount(n, name, "the host reduction's staging buffer")))
            val recvCounts = IntArray(worldSize) { n }
            val recvDispls = IntArray(worldSize) { it * n }
            val meta = intArrays(counts, displs, recvCounts, recvDispls)
            val m = addr(meta); val w4 = 4L * worldSize
            val src = addr(pre?.target ?: input); val dst = addr(blocks)
            collective(call, sig, arrayOf(input, blocks, meta, pre?.target),
                { pre?.apply(); binding.alltoallv(src, m, m + w4, t, dst, m + 2 * w4, m + 3 * w4, t, handle) },
                { r -> pre?.apply(); binding.ialltoallv(src, m, m + w4, t, dst, m + 2 * w4, m + 3 * w4, t, handle, r) })
            pre?.release()
            HostReduction.reduceBlocks(blocks.segment, worldSize, n.toLong(), input.dtype, op, output.segment)
            return output
        }
        val meta = intArrays(counts)
        val cAddr = addr(meta)
        val src = addr(pre?.target ?: input); val dst = addr(output); val o = abi.op(op, input.dtype)
        val flip = workarounds.flipsUnsignedBytes(input, op)
        val rt = workarounds.reduceType(input, op)
        if (flip) workarounds.flipTopBits(input)
        try {
            collective(call, sig, arrayOf(input, output, meta, pre?.target),
                { pre?.apply(); binding.reduceScatter(src, dst, cAddr, rt, o, handle) },
                { r -> pre?.apply(); binding.ireduceScatter(src, dst, cAddr, rt, o, handle, r) })
            pre?.release()
        } finally {
            if (flip) {
                workarounds.flipTopBits(input)
                workarounds.flipTopBits(output)
            }
        }
        if (op == ReduceOp.Avg) HostReduction.divide(output.segment, output.dtype, output.numel, worldSize)
        return output
    }

    private suspend fun runAllToAllV(call: Call, output: Tensor, input: Tensor, inputSplits: List<Int>, outputSplits: List<Int>): Tensor {
        val name = call.name
        val rowElements = input.stride(0)
        val (sendCounts, sendDispls) = elementCounts(inputSplits, rowElements)
        val (recvCounts, recvDispls) = elementCounts(outputSplits, rowElements)
        // The last two arrays hold the split check's exchange: this rank's inputSplits out, and what
        // each peer sends this rank in (one MPI_Alltoall of ints, only with the consistency check).
        val meta = intArrays(sendCounts, sendDispls, recvCounts, recvDispls, inputSplits.toIntArray(), IntArray(worldSize))
        val m = addr(meta); val w4 = 4L * worldSize
        val t = abi.datatype(input.dtype)
        val src = addr(input); val dst = addr(output)
        val sig = sig(call)
        val entry = call.entry
        val splitsCheck = if (sig == null) null else SplitsExchange(meta, 4 * worldSize, outputSplits, name, entry)
        collective(call, sig, arrayOf(input, output, meta),
            { binding.alltoallv(src, m, m + w4, t, dst, m + 2 * w4, m + 3 * w4, t, handle) },
            { r -> binding.ialltoallv(src, m, m + w4, t, dst, m + 2 * w4, m + 3 * w4, t, handle, r) },
            splitsCheck)
        return output
    }

    /** Work on the MPI thread before the signature's exchange: it may complete the signature (its extra word). */
    private interface PreSignature {
        fun blocking(sig: LongArray)

        /** Polled on the MPI thread; [watchNotices]: a peer's abort notice ends it ([pollSignature]). */
        fun polling(sig: LongArray, callerJob: Job?, watchNotices: Boolean = false)
    }

    /**
     * allToAllV's split check: one `MPI_Alltoall` of one int per pair tells each rank how many rows
     * every peer sends it; [CollectiveSignature.splitsWord][dev.tpcomm.spi.CollectiveSignature.splitsWord]
     * turns a disagreement with its outputSplits into the signature's extra word, so the digest
     * exchange that follows fails every rank with a [CollectiveMismatchException] naming the ranks
     * that expected other sizes, before any row moves. [meta]'s ints from [at] hold this rank's
     * inputSplits, then the received counts.
     */
    private inner class SplitsExchange(
        private val meta: Tensor, private val at: Int, private val outputSplits: List<Int>,
        private val operation: String, private val entry: FlightRecorder.Entry,
    ) : PreSignature {
        private val sendAddr = addr(meta) + 4L * at
        private val recvAddr = sendAddr + 4L * worldSize

        private fun finish(sig: LongArray) {
            val sentToMe = IntArray(worldSize) { meta.segment.getAtIndex(ValueLayout.JAVA_INT, (at + worldSize + it).toLong()) }
            setSplitsWord(sig, 0, sentToMe, outputSplits)
        }

        override fun blocking(sig: LongArray) {
            val i32 = abi.datatype(dev.tpcomm.DType.Int32)
            runBlockingCall("$operation(splits)", entry, meta) { binding.alltoall(sendAddr, 1, i32, recvAddr, 1, i32, handle) }
            finish(sig)
        }

        override fun polling(sig: LongArray, callerJob: Job?, watchNotices: Boolean) {
            val i32 = abi.datatype(dev.tpcomm.DType.Int32)
            check(binding.ialltoall(sendAddr, 1, i32, recvAddr, 1, i32, handle, scratchAddress + OFF_REQUEST), operation, entry)
            pollSignature(operation, entry, callerJob, watchNotices)
            finish(sig)
        }
    }

    private suspend fun runBarrier(call: Call) {
        // With the consistency check the exchange itself is the barrier (MpiSlotPayload.Barrier).
        collective(call, sig(call), null,
            { binding.barrier(handle) },
            { r -> binding.ibarrier(handle, r) },
            payload = if (slotsCarry) MpiSlotPayload.Barrier else null)
    }

    // ------------------------------------------------------------------ point to point

    /** [send] of a validated [tensor] MPI takes as it is. */
    internal suspend fun runSend(entry: FlightRecorder.Entry, tensor: Tensor, dst: Int, tag: Int, handOff: MpiHandOff?) {
        val name = "send"
        val n = mpiCount(tensor)
        if (dst == rank) {
            // MPI sends a copy: the front's tensor is let go once copied.
            try {
                return sendToSelf(entry, tensor, n, tag)
            } finally {
                handOff?.mpiDone()
            }
        }
        val buf = addr(tensor); val t = abi.datatype(tensor.dtype)
        pointToPoint(entry, name, tensor, MpiPending.Kind.Request, handOff) { r -> binding.isend(buf, n, t, dst, tag, handle, r) }
    }

    /**
     * A send to this rank returns once the message is buffered: the tensor is copied, the copy is
     * sent with `MPI_Isend`, and the dispatcher's progress loop completes that send whenever a
     * receive takes it. Waiting for the send, as for other peers, would deadlock a program that
     * sends to itself before receiving once the message is too big for MPI's eager protocol
     * (16 MiB on Open MPI and MPICH). A self-send nobody receives within the timeout fails the
     * communicator like any operation past its deadline.
     */
    private suspend fun sendToSelf(entry: FlightRecorder.Entry, tensor: Tensor, n: Int, tag: Int) {
        val name = "send"
        val copy = tensor.copy()
        inFlight(entry) {
            dispatcher.execute {
                ensureUsable(name, entry)
                checkAbortNotices(name, entry)
                val p = MpiPending(this, entry, name, MpiPending.Kind.Request, copy)
                check(binding.isend(copy.segment.address(), n, abi.datatype(copy.dtype), rank, tag, handle, p.request), name, entry)
                p.mainPending = true
                p.issued()
                background.launch {
                    try {
                        dispatcher.await(p)
                    } catch (_: Throwable) {
                        // Already recorded: a failure breaks the communicator (every later call says so).
                    }
                }
            }
        }
    }

    /** Runs the progress of buffered self-sends ([sendToSelf]) on the communicator's thread. */
    private val background = CoroutineScope(dispatcher + SupervisorJob())

    /** [recv] into a validated [tensor] MPI takes as it is. */
    internal suspend fun runRecv(entry: FlightRecorder.Entry, tensor: Tensor, src: Int, tag: Int, handOff: MpiHandOff?): MessageInfo {
        val name = "recv"
        val n = mpiCount(tensor)
        val buf = addr(tensor); val t = abi.datatype(tensor.dtype)
        val mpiSrc = if (src == Communicator.ANY_SOURCE) abi.anySource else src
        val mpiTag = if (tag == Communicator.ANY_TAG) abi.anyTag else tag
        val receive = { r: Long, from: Int, withTag: Int -> binding.irecv(buf, n, t, from, withTag, handle, r) }
        // Probe first, then receive exactly the probed message (its source and tag; MPI keeps
        // messages of one source and tag in order, and every receive of this communicator is
        // posted from its one thread). A message of another size is refused before any receive is
        // posted, so it stays queued and the communicator stays usable. Receiving it into a
        // smaller buffer would truncate: Open MPI reports MPI_ERR_TRUNCATE from MPI_Test, but
        // MPICH 4.0 raises it on no communicator (its generated bindings end in
        // `MPIR_Err_return_comm(NULL, __func__, mpi_errno)`, pmodels/mpich src/binding/c), which
        // the default MPI_ERRORS_ARE_FATAL of MPI_COMM_WORLD turns into an abort of the job.
        val probe = MpiStatusResult().also { it.probeSource = mpiSrc; it.probeTag = mpiTag }
        val status = pointToPoint(entry, name, tensor, MpiPending.Kind.Probe, handOff, probe, receive) { _ -> 0 }
        if (status.refusedBytes >= 0) {
            throw exceptionOf(OperationFailure.OTHER, 
                name, entry.sequence,
                "the message from rank ${status.source} (tag ${status.tag}) has ${status.refusedBytes} bytes but the receiving tensor " +
                    "(${tensor.dtype}${tensor.shape}) has ${tensor.byteSize} bytes; nothing was received and the message is still " +
                    "queued: receive it into a tensor of ${status.refusedBytes} bytes (probe tells the size)",
            )
        }
        return MessageInfo(status.source, status.tag, status.byteCount)
    }

    override suspend fun issueProbe(entry: FlightRecorder.Entry, src: Int, tag: Int): MessageInfo {
        val name = "probe"
        val mpiSrc = if (src == Communicator.ANY_SOURCE) abi.anySource else src
        val mpiTag = if (tag == Communicator.ANY_TAG) abi.anyTag else tag
        val probe = MpiStatusResult().also { it.probeSource = mpiSrc; it.probeTag = mpiTag }
        val status = pointToPoint(entry, name, null, MpiPending.Kind.Probe, null, probe) { _ -> 0 }
        return MessageInfo(status.source, status.tag, status.byteCount)
    }

    /** The front's [monitoredBarrier] runs the core's [MonitoredBarrier] over [control]. */
    override val monitoredBarrierChannel: MonitoredBarrierChannel get() = control

    /**
     * The monitored barrier's messages: one `Int64` with tag [CONTROL_TAG] on [controlHandle], the
     * private duplicate that carries the abort notices (tag [MpiAbortNotices.ABORT_TAG]), so no user
     * receive on [handle] can match them, `MPI_ANY_TAG` and `MPI_ANY_SOURCE` included. Sent with
     * `MPI_Isend` and received as [recv] receives (probe, then `MPI_Irecv` of exactly the probed
     * message), through the same progress loop and deadline; a receive still probing when it is
     * abandoned never posts its `MPI_Irecv`, so a token arriving late stays unreceived in MPI's queue
     * and is never written anywhere. Recorded as `monitoredBarrier`. Its abort breaks the communicator
     * without abort notices: the ranks that reached the barrier learn the missing ranks from rank 0's
     * answer, which a notice arriving first would replace with a generic abort.
     */
    private val control = object : MonitoredBarrierChannel {
        override val errors: CommunicationErrors get() = this@MpiCommunicator.errors
        override val concurrentReceives: Boolean get() = true
        override val callTimeout: kotlin.time.Duration get() = config.timeout

        override suspend fun send(value: Long, dst: Int) {
            val name = MonitoredBarrier.OPERATION
            val t = Tensor.of(longArrayOf(value))
            val entry = beginPointToPoint(name, t, dst, CONTROL_TAG)
            val buf = t.segment.address(); val type = abi.datatype(t.dtype)
            recorded(entry) { pointToPoint(entry, name, t, MpiPending.Kind.Request, null) { r -> binding.isend(buf, 1, type, dst, CONTROL_TAG, controlHandle, r) } }
        }

        override suspend fun recv(src: Int): Long {
            val name = MonitoredBarrier.OPERATION
            val t = Tensor.zeros(dev.tpcomm.DType.Int64, 1)
            val entry = beginPointToPoint(name, t, src, CONTROL_TAG)
            val buf = t.segment.address(); val type = abi.datatype(t.dtype)
            val receive = { r: Long, from: Int, withTag: Int -> binding.irecv(buf, 1, type, from, withTag, controlHandle, r) }
            val probe = MpiStatusResult().also { it.probeSource = src; it.probeTag = CONTROL_TAG; it.probeHandle = controlHandle }
            return recorded(entry) {
                val status = pointToPoint(entry, name, t, MpiPending.Kind.Probe, null, probe, receive) { _ -> 0 }
                if (status.refusedBytes >= 0) {
                    throw exceptionOf(OperationFailure.OTHER, name, entry.sequence, "rank ${status.source} sent a message of ${status.refusedBytes} bytes where an 8-byte token was expected")
                        .also { markBroken(it) }
                }
                t.getLong(0)
            }
        }

        override fun ensureUsable() {
            this@MpiCommunicator.ensureUsable(MonitoredBarrier.OPERATION, null)
        }

        override fun abort(cause: CommunicationException) {
            markBroken(cause, notifyPeers = false)
        }
    }

    // ------------------------------------------------------------------ groups

    /** `MPI_Comm_split` of [call] (a split, or a group: then [color] and [key] come from the ranks). */
    private suspend fun runSplit(call: Call, color: Int?, key: Int): Communicator? {
        val name = call.name
        val entry = call.entry
        val sig = sig(call)
        val handOff = handOver(call)
        // onThread: a caller whose withTimeout expires is told at its deadline ([cancelledInFlight]).
        val newHandle = inFlight(entry) {
            onThread(handOff) {
                try {
                    ensureUsable(name, entry)
                    if (sig != null) exchangeSignatureBlocking(sig, name, entry)
                    val out = scratchAddress + OFF_HANDLE
                    runBlockingCall(name, entry, null) { binding.commSplit(handle, color ?: abi.undefined, key, out) }
                    val made = abi.readHandle(scratch, OFF_HANDLE)
                    if (made == abi.commNull) longArrayOf(made, 0L) else longArrayOf(made, controlOf(made, name, entry))
                } finally {
                    handOff.mpiDone()
                }
            }
        }
        if (newHandle[0] == abi.commNull) return null
        return MpiBackendFactory.wrap(
            runtime, binding, newHandle[0], config, mpiConfig, "${this.name}.split${entry.collectiveSequence}-color$color", existingControl = newHandle[1],
        )
    }

    /**
     * The abort-notice duplicate of a communicator [made] by [operation], made here on this
     * communicator's thread under its deadline (`MPI_Comm_dup` is collective over [made]): a rank
     * whose caller gave up (withTimeout) still finishes it, so the peers' new communicator is never
     * left waiting for it outside any deadline.
     */
    private fun controlOf(made: Long, operation: String, entry: FlightRecorder.Entry): Long {
        val out = scratchAddress + OFF_HANDLE
        // Errors on the new communicator and its duplicate are return codes (a duplicate inherits it).
        check(binding.commSetErrhandler(made, abi.errorsReturn), operation, entry)
        runBlockingCall(operation, entry, null) { binding.commDup(made, out) }
        return abi.readHandle(scratch, OFF_HANDLE)
    }

    /**
     * Collective: a new communicator over the same ranks (`MPI_Comm_dup`) with its own thread and
     * the given settings (e.g. a shorter timeout, or `abortOnTimeout = false` for a communicator
     * that may fail without ending the job). Breaking it leaves this one usable. Every rank must call.
     *
     * @throws IllegalArgumentException when [commConfig]'s worldSize/rank differ from this communicator's.
     */
    public suspend fun duplicate(commConfig: CommConfig = config, mpi: MpiConfig = mpiConfig): MpiCommunicator {
        require(commConfig.worldSize == worldSize && commConfig.rank == rank) {
            "duplicate: the configuration says rank ${commConfig.rank} of ${commConfig.worldSize}, this communicator is rank $rank of $worldSize"
        }
        return duplicateCollective(Duplication(commConfig, mpi)) as MpiCommunicator
    }

    /** [duplicate]'s settings for the new communicator ([Call.extra] of its call). */
    private class Duplication(val commConfig: CommConfig, val mpiConfig: MpiConfig)

    /** `MPI_Comm_dup` of [call] ([duplicate], issued by the front as a collective of its own). */
    private suspend fun runDuplicate(call: Call): MpiCommunicator {
        val name = call.name
        val entry = call.entry
        val settings = call.extra as Duplication
        val sig = sig(call)
        val handOff = handOver(call)
        val newHandle = inFlight(entry) {
            onThread(handOff) {
                try {
                    ensureUsable(name, entry)
                    if (sig != null) exchangeSignatureBlocking(sig, name, entry)
                    val out = scratchAddress + OFF_HANDLE
                    runBlockingCall(name, entry, null) { binding.commDup(handle, out) }
                    val made = abi.readHandle(scratch, OFF_HANDLE)
                    longArrayOf(made, controlOf(made, name, entry))
                } finally {
                    handOff.mpiDone()
                }
            }
        }
        return MpiBackendFactory.wrap(
            runtime, binding, newHandle[0], settings.commConfig, settings.mpiConfig, "${this.name}.dup${entry.collectiveSequence}", existingControl = newHandle[1],
        )
    }

    // ------------------------------------------------------------------ lifecycle

    /**
     * Frees the MPI communicator (`MPI_Comm_free`) on its thread, ends the thread, and, when this
     * is the last MPI communicator of the process, calls `MPI_Finalize`. Idempotent. A broken
     * communicator or one with operations in flight is not freed (MPI may still use it).
     */
    override fun shutdown() {
        runtime.communicators.unregister(watched)
        val free = !isAborted && inFlightOps == 0 && !runtime.finalized
        try {
            if (!dispatcher.isClosed) {
                runBlocking {
                    dispatcher.execute {
                        if (free) {
                            notices.retire()
                            abi.writeHandle(scratch, OFF_HANDLE, handle)
                            binding.commFree(scratchAddress + OFF_HANDLE)
                            abi.writeHandle(scratch, OFF_HANDLE, controlHandle)
                            binding.commFree(scratchAddress + OFF_HANDLE)
                        }
                        runtime.release()
                    }
                }
            } else {
                runtime.release()
            }
        } finally {
            if (ownsDispatcher) dispatcher.close()
            if (free) arena.close() else runtime.pin(arena)
        }
    }

    override fun toString(): String = "MpiCommunicator($name, rank $rank of $worldSize, ${runtime.implementation})"

    // ------------------------------------------------------------------ engine

    /**
     * The small-message fast path: blocking mode and the caller already on this communicator's
     * thread, so the MPI calls (the signature exchange when [checksConsistency], then the
     * operation) run right here with no dispatch, lambda or continuation of their own (same
     * semantics as [collective]).
     */
    private fun fastPath(): Boolean = blockingMode && dispatcher.isNativeThread && !dispatcher.isClosed

    private inline fun inlineBlocking(
        entry: FlightRecorder.Entry, operation: String, keepAlive: Any?, sig: LongArray?, preSignature: PreSignature? = null,
        payload: MpiSlotPayload? = null, call: () -> Int,
    ) {
        // The library's own check, right before the native call: the state may have changed since the front's.
        ensureUsable(operation, entry)
        checkedBlockingCall(entry, operation, keepAlive, sig, preSignature, payload, call)
    }

    /**
     * A blocking collective with its consistency check, on whichever thread owns MPI now: the
     * pre-signature step ([PreSignature.blocking]), the signature's exchange, then the operation,
     * unless the exchange carried it ([payload], see [MpiSlotPayload]). The exchange and the
     * operation are one call: once the peers agreed on the digest they are entering the operation,
     * so it runs even if the caller was released meanwhile (a cancelled blocking call may still
     * complete natively; skipping it would leave them waiting).
     */
    private inline fun checkedBlockingCall(
        entry: FlightRecorder.Entry, operation: String, keepAlive: Any?, sig: LongArray?, preSignature: PreSignature?,
        payload: MpiSlotPayload?, call: () -> Int,
    ) {
        if (sig != null && preSignature != null) {
            // Its all-to-all is then the first MPI call of this collective: polled, watching the notices.
            if (exchangeWatchesNotices) preSignature.polling(sig, null, watchNotices = true) else preSignature.blocking(sig)
        }
        if (sig != null && exchangeSignatureBlocking(sig, operation, entry, payload)) return
        runBlockingCall(operation, entry, keepAlive, call)
    }

    /**
     * Whether a collective may run on its caller's thread ([MpiConfig.callerRunsLimit]): blocking
     * mode, and a thread of this communicator's own (`MPI_THREAD_MULTIPLE`), so MPI may be called
     * from any thread as long as this communicator's calls do not overlap, which
     * [NativeDispatcher.runHereIfIdle] guarantees.
     */
    private val callerRuns: Boolean = blockingMode && ownsDispatcher && mpiConfig.callerRunsLimit > 0

    /** The largest buffer of an operation's [keepAlive] (a tensor, an array of them, or null), in bytes. */
    private fun largestBuffer(keepAlive: Any?): Long = when (keepAlive) {
        null -> 0L
        is Tensor -> keepAlive.byteSize
        is Array<*> -> keepAlive.maxOfOrNull { (it as? Tensor)?.byteSize ?: 0L } ?: 0L
        else -> Long.MAX_VALUE
    }

    /**
     * Issues collective [call] (signature exchange first when enabled) and waits for it: on the
     * caller's thread when [callerRuns] allows it for this size, the caller may be held
     * ([callerMayBeHeld]: no `withTimeout` around it, no [dev.tpcomm.coroutines.Overlapping]) and
     * the communicator's thread is idle (the natural call path at the fast path's cost: no hand-off;
     * the front's retain holds the tensors until the blocking call returned), else on the
     * communicator's thread with the caller suspended: then the front's retained tensors are handed
     * over ([MpiHandOff]) and released once both the caller left and MPI is done with them.
     * [keepAlive] holds every buffer MPI touches (the call's tensors and this backend's staging).
     */
    private suspend fun collective(
        call: Call,
        sig: LongArray?,
        keepAlive: Any?,
        blocking: () -> Int,
        start: (Long) -> Int,
        preSignature: PreSignature? = null,
        payload: MpiSlotPayload? = null,
    ) {
        val entry = call.entry
        val operation = call.name
        if (callerRuns && largestBuffer(keepAlive) <= mpiConfig.callerRunsLimit) {
            val context = currentCoroutineContext()
            // A caller cancelled before the call must not start it (as on the communicator's thread).
            context.ensureActive()
            // Not under the caller's withTimeout (its deadline must fire) or an Overlapping start.
            if (callerMayBeHeld(context) &&
                dispatcher.runHereIfIdle { inlineBlocking(entry, operation, keepAlive, sig, preSignature, payload, blocking) }
            ) {
                return
            }
        }
        val handOff = handOver(call)
        val callerJob = if (blockingMode) null else currentCoroutineContext()[Job]
        val pending = inFlight(entry) {
            onThread(handOff) {
                var handedToRequest = false
                try {
                    // The library's own check, right before the native call: the state may have changed while queued.
                    ensureUsable(operation, entry)
                    if (!blockingMode) checkAbortNotices(operation, entry)
                    if (blockingMode) {
                        checkedBlockingCall(entry, operation, keepAlive, sig, preSignature, payload, blocking)
                        null
                    } else {
                        // The signature exchange completes before the operation starts, so mismatched
                        // collectives never reach MPI; polling it here keeps issue order = call order.
                        if (sig != null) {
                            if (preSignature != null) preSignature.polling(sig, callerJob, exchangeWatchesNotices)
                            exchangeSignaturePolling(sig, operation, entry, callerJob)
                            ensureUsable(operation, entry)
                        }
                        // A caller cancelled while the signature was exchanged must not start the operation.
                        if (callerJob?.isCancelled == true) throw CancellationException("cancelled before $operation started")
                        val p = MpiPending(this, entry, operation, MpiPending.Kind.Request, keepAlive)
                        check(start(p.request), operation, entry)
                        p.handOff = handOff
                        handedToRequest = true
                        p.mainPending = true
                        p.issued()
                        p
                    }
                } finally {
                    // MPI is done with the tensors (a blocking call returned, or nothing was started),
                    // unless a non-blocking operation took them: it lets them go when it completes
                    // (and never when it fails: MPI may still write them).
                    if (!handedToRequest) handOff.mpiDone()
                }
            }
        }
        if (pending != null) inFlight(entry) { dispatcher.await(pending) }
    }

    /**
     * The hand-off of collective [call] to the communicator's thread ([Call.state], where
     * [deadlinePassed] finds it): the front's retained tensors become this backend's to release
     * ([handOverTensors]; [await] lets the caller's side go when it returns).
     */
    private fun handOver(call: Call): MpiHandOff {
        val h = MpiHandOff(this, call, null)
        call.state = h
        handOverTensors(call.entry)
        return h
    }

    /**
     * Runs [block], a caller's wait for MPI (its call queued for or running on the communicator's
     * thread): a closed thread ends it as a closed communicator, and the caller's cancellation
     * ([cancelledInFlight]) aborts the communicator.
     */
    private suspend inline fun <T> inFlight(entry: FlightRecorder.Entry, block: () -> T): T =
        try {
            block()
        } catch (e: NativeDispatcherClosedException) {
            throw OperationFailedSignal(OperationFailure(OperationFailure.ABORTED, "the communicator was closed", e))
        } catch (c: CancellationException) {
            throw cancelledInFlight(entry, c)
        }

    /**
     * The caller of [entry]'s operation was cancelled ([c]: its `withTimeout`, a cancelled handle)
     * while its call was queued for or inside MPI: the peers cannot finish it without this rank, so
     * the communicator aborts through the front ([abortWith], the peers told), with the front's
     * [cancellationReason]: a caller's deadline is the named [CommunicationTimeoutException] the
     * caller gets; any other cancellation stays the caller's. A blocking MPI call still in progress
     * stays under the watchdog, which applies the job policy (`MPI_Abort` with
     * [MpiConfig.abortOnTimeout]) at the communicator's deadline.
     */
    private suspend fun cancelledInFlight(entry: FlightRecorder.Entry, c: CancellationException): Throwable {
        // The thread may end the block with its own CancellationException (its signature poll saw
        // the caller cancelled) before the caller's own reaches it: the caller's cause is the one to report.
        val cause = try {
            currentCoroutineContext().ensureActive()
            c
        } catch (own: CancellationException) {
            own
        }
        val reason = cancellationReason(entry.operation, entry.sequence, cause, "while its call was in flight")
        abortWith(reason, abortDetail(notifyPeers = true, MpiAbortNotices.REASON_FAILED, now = false))
        return if (cause is TimeoutCancellationException) reason else cause
    }

    /**
     * Runs [block] on the communicator's thread and returns its result (inline when already there).
     * Unlike `withContext`, the caller does not wait for a block that is running when its coroutine
     * is cancelled (its `withTimeout` expired, its handle was cancelled): it is resumed at once,
     * while the blocking MPI call goes on under the watchdog (the communicator is aborted by the
     * caller's cancellation, see [cancelledInFlight]). A block cancelled before it started never starts,
     * nor does one whose deadline passed while it was queued: its caller is released then with the
     * [CommunicationTimeoutException] ([deadlinePassed]), whatever holds the thread (not with the
     * opt-in spinning hand-off, `TPCOMM_MPI_HANDOFF_SPIN_US`, whose caller waits for the thread).
     *
     * @throws NativeDispatcherClosedException when the thread is closed.
     */
    private suspend fun <T> onThread(handOff: MpiHandOff, block: () -> T): T {
        if (dispatcher.isNativeThread) {
            handOff.start()
            return block()
        }
        if (dispatcher.isClosed) throw NativeDispatcherClosedException("the MPI thread of $name is closed")
        if (HANDOFF_SPIN_NANOS > 0) {
            // The spinning hand-off's caller waits for the thread: its block always starts.
            handOff.start()
            return dispatcher.handOff(HANDOFF_SPIN_NANOS) { detached(block) }
        }
        return suspendCancellableCoroutine { cont ->
            // Cancelled while queued: the block never starts, so MPI never holds the tensors.
            cont.invokeOnCancellation { if (handOff.abandon()) handOff.mpiDone() }
            handOff.waitWith(cont)
            dispatcher.dispatch(EmptyCoroutineContext, Runnable {
                // Started: from here its deadline is the job policy's ([deadlinePassed]), not a release.
                // A call cancelled (or released at its deadline) while queued never starts: the other ranks are told by the abort.
                if (handOff.start()) cont.resumeWith(runCatching { detached(block) })
            })
        }
    }

    /** Runs [block] with [callerDetached] set: its caller waits elsewhere and may be released before it returns. */
    private inline fun <T> detached(block: () -> T): T {
        callerDetached = true
        try {
            return block()
        } finally {
            callerDetached = false
        }
    }

    /**
     * True while [onThread] runs a block whose caller is suspended elsewhere: a `withTimeout`,
     * `awaitAll(timeout)` or cancellation may release that caller while the block is inside MPI,
     * and the communicator is then aborted once the block returns. The consistency exchange tells
     * the peers ([MpiSignatureProtocol.DETACHED]). Communicator's thread only.
     */
    private var callerDetached: Boolean = false

    /**
     * Whether the next consistency exchange must watch the peers' abort notices
     * ([exchangeSignatureBlocking]): set after an exchange in which some rank's caller was
     * [detached][callerDetached]. Such a rank may abandon the communicator when its caller is
     * released (issue 32 finding 4: ranks 0 and 1 passed `awaitAll(timeout = 2 s)` while their
     * all-reduce waited for rank 2, which arrived 6 s later); it tells the peers with an abort
     * notice only after its own blocking call returned, which is when the peers' call returns too,
     * so a peer's next call would otherwise be issued before the notice arrives and block in an
     * `MPI_Allgather` that rank never joins, until the communicator's timeout. Read and written by
     * whichever thread holds the communicator's MPI calls.
     */
    private var exchangeWatchesNotices: Boolean = false

    /**
     * Receives that still probe for their message, in issue order (MPI thread only). A receive
     * posts its `MPI_Irecv` only when no earlier one that could take the same message (same source
     * and tag, or a wildcard on either side) still probes, so receives match messages in the order
     * they were issued, as posted MPI receives do, whatever order the progress loop polls them in.
     */
    internal val probingReceives = java.util.ArrayDeque<MpiPending>()

    /** Whether an earlier receive of [probingReceives] could take the message [p] would probe (MPI thread only). */
    internal fun waitsForEarlierReceive(p: MpiPending): Boolean {
        val mine = p.result ?: return false
        for (q in probingReceives) {
            if (q === p) return false
            val other = q.result ?: continue
            if (mine.probeHandle != other.probeHandle) continue // another MPI communicator: they never take each other's messages
            val source = mine.probeSource == other.probeSource || mine.probeSource == abi.anySource || other.probeSource == abi.anySource
            val tag = mine.probeTag == other.probeTag || mine.probeTag == abi.anyTag || other.probeTag == abi.anyTag
            if (source && tag) return true
        }
        return false
    }

    /**
     * Issues a non-blocking point-to-point call (or a probe) and waits for its status. [handOff]:
     * the front's retained tensor of the call, released once both the caller left and MPI is done
     * with [keepAlive] (null: a message of this backend's own, nothing of the front's).
     */
    private suspend fun pointToPoint(
        entry: FlightRecorder.Entry,
        operation: String,
        keepAlive: Any?,
        kind: MpiPending.Kind,
        handOff: MpiHandOff?,
        result: MpiStatusResult = MpiStatusResult(),
        /** For a receive: posts it for the probed message (request, source, tag) once a probe found one of the expected size. */
        receive: ((Long, Int, Int) -> Int)? = null,
        start: (Long) -> Int,
    ): MpiStatusResult {
        val pending = inFlight(entry) {
            try {
                dispatcher.execute {
                    // Cancelled while queued: never starts ([abandon] below let the tensor go).
                    if (handOff != null && !handOff.start()) throw CancellationException("$operation was cancelled before it started")
                    var handedToRequest = false
                    val p = try {
                        // The library's own check, right before the native call: the state may have changed while queued.
                        ensureUsable(operation, entry)
                        checkAbortNotices(operation, entry)
                        val p = MpiPending(this, entry, operation, kind, keepAlive)
                        p.result = result
                        p.receive = receive
                        if (receive != null) {
                            p.expectedBytes = (keepAlive as Tensor).byteSize
                            probingReceives.addLast(p) // here, on the MPI thread, in issue order
                        }
                        if (kind == MpiPending.Kind.Request) {
                            check(start(p.request), operation, entry)
                        } else {
                            start(0L)
                        }
                        p.handOff = handOff
                        handedToRequest = true
                        p
                    } finally {
                        if (!handedToRequest) handOff?.mpiDone()
                    }
                    p.mainPending = true
                    p.issued()
                    p
                }
            } catch (c: CancellationException) {
                if (handOff != null && handOff.abandon()) handOff.mpiDone()
                throw c
            }
        }
        inFlight(entry) { dispatcher.await(pending) }
        return result
    }

    /** Runs one blocking MPI call (its deadline is the front's: [deadlinePassed] aborts it from the watchdog's thread). */
    private inline fun runBlockingCall(operation: String, entry: FlightRecorder.Entry, keepAlive: Any?, call: () -> Int) {
        currentOperation = operation
        currentSequence = entry.sequence
        val profiling = mpiConfig.profiling
        val t0 = if (profiling) System.nanoTime() else 0L
        activeCallCell.lazySet(++callTokens)
        val rc = try {
            call()
        } finally {
            activeCallCell.lazySet(0L)
            Reference.reachabilityFence(keepAlive)
        }
        if (profiling) recordProfile(operation, System.nanoTime() - t0)
        check(rc, operation, entry)
    }

    /**
     * The consistency check as one blocking `MPI_Allgather` of the ranks' slots ([MpiSignatureProtocol]),
     * carrying [payload] when there is one: true when the slots finished the operation (nothing is
     * left to issue), false when it must still be issued. A mismatch fails every rank here.
     */
    private fun exchangeSignatureBlocking(sig: LongArray, operation: String, entry: FlightRecorder.Entry, payload: MpiSlotPayload? = null): Boolean {
        signatures.load(sig, payload, callerDetached)
        val t = abi.int64Type
        val ss = signatures.slotSend.address(); val sr = signatures.slotsReceived.address()
        if (exchangeWatchesNotices) {
            // A peer's caller was detached in the previous exchange: it may have abandoned the
            // communicator since, and its notice may still be on the way. Polled, so that notice ends
            // this exchange instead of an MPI_Allgather that peer never joins.
            check(binding.iallgather(ss, SLOT_LONGS, t, sr, SLOT_LONGS, t, handle, scratchAddress + OFF_REQUEST), operation, entry)
            pollSignature(operation, entry, null, watchNotices = true)
        } else {
            runBlockingCall("$operation(signature)", entry, null) { binding.allgather(ss, SLOT_LONGS, t, sr, SLOT_LONGS, t, handle) }
        }
        exchangeWatchesNotices = signatures.anyDetached()
        if (signatures.digestsAgree()) return finishFromSlots(payload)
        // Every rank saw the difference: all gather the full signatures to name the ranks and fields.
        signatures.loadWords(sig)
        val s = signatures.send.address(); val r = signatures.received.address()
        runBlockingCall("$operation(signature)", entry, null) { binding.allgather(s, SIG_LEN, t, r, SIG_LEN, t, handle) }
        failMismatch(operation, entry)
    }

    /**
     * [exchangeSignatureBlocking] with `MPI_Iallgather`s polled on the communicator's thread
     * ([pollSignature]), never carrying the operation ([slotsCarry]).
     */
    private fun exchangeSignaturePolling(sig: LongArray, operation: String, entry: FlightRecorder.Entry, callerJob: Job?) {
        signatures.load(sig, null, callerJob != null)
        val req = scratchAddress + OFF_REQUEST
        val t = abi.int64Type
        check(binding.iallgather(signatures.slotSend.address(), SLOT_LONGS, t, signatures.slotsReceived.address(), SLOT_LONGS, t, handle, req), operation, entry)
        pollSignature(operation, entry, callerJob, exchangeWatchesNotices)
        exchangeWatchesNotices = signatures.anyDetached()
        if (signatures.digestsAgree()) return
        // Every rank saw the difference: all gather the full signatures to name the ranks and fields.
        signatures.loadWords(sig)
        check(binding.iallgather(signatures.send.address(), SIG_LEN, t, signatures.received.address(), SIG_LEN, t, handle, req), operation, entry)
        pollSignature(operation, entry, callerJob)
        failMismatch(operation, entry)
    }

    /**
     * After the digests agreed: finishes the operation from the slots when every rank carried its
     * part (every rank reads the same flags, so every rank decides the same), true when it did.
     */
    private fun finishFromSlots(payload: MpiSlotPayload?): Boolean {
        if (payload == null || !signatures.allCarried()) return false
        payload.finish(signatures.payloads)
        return true
    }

    /**
     * Polls the signature request in the scratch slot until done, this call's deadline passes
     * ([deadlinePassed]), the caller is cancelled, or, with [watchNotices], a peer's abort notice
     * arrives ([checkAbortNotices]: a peer that abandoned the communicator never joins this exchange).
     */
    private fun pollSignature(operation: String, entry: FlightRecorder.Entry, callerJob: Job?, watchNotices: Boolean = false) {
        val req = scratchAddress + OFF_REQUEST
        val flag = scratchAddress + OFF_FLAG
        // The dispatcher's wait policy (spin, yield, then park up to its longest park), not a spin
        // that could last until the deadline while a peer is late.
        val backoff = Backoff(dispatcher.spinIterations, yieldIterations = 16, dispatcher.maxParkNanos)
        while (true) {
            check(binding.test(req, flag, abi.statusIgnore), operation, entry)
            if (scratch.get(ValueLayout.JAVA_INT, OFF_FLAG) != 0) break
            // This call's own deadline ends it. A peer's abort notice ends it only with watchNotices
            // (a first exchange after a detached caller): the second exchange, after the digests
            // differed, completes (a peer that found a mismatch has sent its words), so every rank
            // names the mismatch itself.
            entry.timeout?.let { throw it }
            if (watchNotices) checkAbortNotices(operation, entry)
            if (callerJob?.isCancelled == true) {
                // The signature exchange stays in flight: its buffers belong to the (now broken) communicator.
                throw CancellationException("cancelled while exchanging the signature of $operation")
            }
            backoff.idle()
        }
    }

    /** A pending operation of a communicator broken by another call fails at once (its buffers stay pinned). */
    internal fun ensureNotBrokenWhileInFlight(operation: String, entry: FlightRecorder.Entry) {
        val cause = failure ?: return
        entry.timeout?.let { throw it }
        val late = peerTimedOut
        if (late >= 0) throw exceptionOf(OperationFailure.TIMEOUT, operation, entry.sequence, peerTimeoutMessage(late, operation), cause)
        throw exceptionOf(OperationFailure.ABORTED, operation, entry.sequence, "aborted while this call was in flight: ${abortedMessage(cause)}", cause)
    }

    private fun failMismatch(operation: String, entry: FlightRecorder.Entry): Nothing {
        // The digests differed, so the full signatures do (a digest collision the other way round
        // is impossible: equal signatures have equal digests).
        val m = compareSignatures(signatures.all(), entry.sequence, signatures.description)
            ?: error("$operation: the signature digests differ across ranks but the signatures do not")
        val e = exceptionOf(m, operation, entry.sequence)
        markBroken(e)
        throw e
    }

    /** [call]'s signature as the front encodes it, or null without the consistency check. */
    private fun sig(call: Call): LongArray? {
        if (!checksConsistency) return null
        return LongArray(MpiSignatureProtocol.SIG_LEN).also { call.encodeSignature(it, 0) }
    }

    /** Maps an MPI error code to a [CommunicationException] (and breaks the communicator). */
    internal fun check(rc: Int, operation: String, entry: FlightRecorder.Entry) {
        if (rc == 0) return
        val e = exceptionOf(OperationFailure.OTHER, operation, entry.sequence, "MPI error $rc: ${MpiErrors.describe(binding, rc)}")
        markBroken(e)
        throw e
    }

    /**
     * The exception for a failed staging copy of [operation] ([MpiDeviceStaging]); when [breaks],
     * the communicator is broken first (this rank cannot join the operation its peers are in).
     */
    internal fun stagingFailed(operation: String, message: String, cause: Throwable, breaks: Boolean): CommunicationException {
        val e = exceptionOf(OperationFailure.OTHER, operation, -1, message, cause)
        if (breaks) markBroken(e)
        return e
    }

    /** Keeps [obj] (memory MPI may still touch) reachable for the life of the process. */
    internal fun keepForever(obj: Any) = runtime.pin(obj)

    /** How the CUDA-awareness was decided, for messages. */
    internal val cudaAwareness: String
        get() = "MPIX_Query_cuda_support ${if (runtime.cudaSupport < 0) "is missing" else "returned ${runtime.cudaSupport}"}; mpi.cudaAware=${mpiConfig.cudaAware}"

    /** Throws when this communicator is closed or failed; the call recorded as [entry] that timed out ends with its own timeout. */
    private fun ensureUsable(operation: String, entry: FlightRecorder.Entry?) {
        val sequence = entry?.sequence ?: CommunicationErrors.NO_SEQUENCE
        if (isClosed) throw exceptionOf(OperationFailure.ABORTED, operation, sequence, abortedMessage(closedException()), closedException())
        entry?.timeout?.let { throw it }
        failure?.let { throw errors.abortedBy(operation, sequence, it) }
    }

    /**
     * Aborts this communicator with [cause] through the front (first cause wins), which then tells
     * the peers ([aborting]) unless [notifyPeers] is false (the cause is a peer's notice), with
     * [reason]. The notice is sent from the communicator's thread, after the call it may be blocked
     * in; with [now] (the job is about to end: a deadline with `MPI_Abort`, or the program failed)
     * and under `MPI_THREAD_MULTIPLE`, from this thread at once. Not at once for a caller's deadline
     * or a cancellation: this rank's blocking call is still inside MPI and completes when the peers
     * join it, which a notice received first would make them refuse (the call, and the job with it,
     * would then only end at the communicator's deadline).
     */
    private fun markBroken(cause: Throwable, notifyPeers: Boolean = true, reason: Int = MpiAbortNotices.REASON_FAILED, now: Boolean = false) {
        abortWith(cause, abortDetail(notifyPeers, reason, now))
    }

    private fun abortDetail(notifyPeers: Boolean, reason: Int, now: Boolean): Int =
        DETAIL_SET or (if (notifyPeers) NOTIFY_PEERS else 0) or (if (now) NOTIFY_NOW else 0) or (reason and REASON_MASK)

    /**
     * A peer's abort notice arrived (seen by the watchdog, [MpiCommunicators.Member.pollPeerNotices]):
     * the communicator is aborted, naming [from], and its flight recorder dumped. When this rank is
     * blocked inside a collective that can now never complete, it also prints the exception; the
     * call stays under the watchdog, and the job ends by [from]'s own `MPI_Abort` (which waits
     * for this print and dump: a second `MPI_Abort` from here could end the other peers before
     * theirs) or, failing that, at this call's deadline ([deadlinePassed]). An idle communicator is only
     * marked: its next call throws [CommunicatorAbortedException].
     */
    private fun peerAborted(from: Int, reason: Int) {
        if (reason == MpiAbortNotices.REASON_TIMEOUT) peerTimedOut = from
        val blocked = activeCallCell.get() != 0L
        val operation = if (blocked) currentOperation else PEER_NOTICE
        val sequence = if (blocked) currentSequence else CommunicationErrors.NO_SEQUENCE
        val e = exceptionOf(OperationFailure.ABORTED, operation, sequence, peerAbortMessage(from, reason))
        markBroken(e, notifyPeers = false)
        if (!blocked) return
        System.err.println("tpcomm-mpi: rank $rank: ${e.javaClass.name}: ${e.message}")
        System.err.flush()
    }

    private fun peerAbortMessage(from: Int, reason: Int): String = when (reason) {
        MpiAbortNotices.REASON_PROGRAM_FAILED ->
            "rank $from failed (an exception escaped its program, it exited with a non-zero status, or a signal interrupted it; its output names the cause)"
        MpiAbortNotices.REASON_TIMEOUT -> "rank $from aborted the communicator: its call passed its deadline"
        else -> "rank $from aborted the communicator (it failed, timed out, or cancelled an in-flight call)"
    }

    /** The rank whose deadline notice ([MpiAbortNotices.REASON_TIMEOUT]) broke this communicator, or -1. */
    @Volatile private var peerTimedOut: Int = -1

    private fun peerTimeoutMessage(from: Int, operation: String): String =
        "$operation did not complete: rank $from passed its deadline (${config.timeout}) first and aborted the communicator " +
            "(a rank may have stalled, died, or called a different collective)"

    /**
     * Fails with [CommunicatorAbortedException] when another rank reported that it broke this
     * communicator; an operation [inFlight] that a peer's deadline ended fails with
     * [CommunicationTimeoutException] instead (the peer timed out waiting in it, as this rank would have).
     */
    internal fun checkAbortNotices(operation: String, entry: FlightRecorder.Entry, inFlight: Boolean = false) {
        if (worldSize == 1) return
        if (!notices.receivePosted) check(notices.postReceive(), operation, entry)
        val from = notices.arrived()
        if (from < 0) return
        val reason = notices.reason
        if (reason == MpiAbortNotices.REASON_TIMEOUT) peerTimedOut = from
        val e = if (inFlight && reason == MpiAbortNotices.REASON_TIMEOUT) {
            exceptionOf(OperationFailure.TIMEOUT, operation, entry.sequence, peerTimeoutMessage(from, operation))
        } else {
            exceptionOf(OperationFailure.ABORTED, operation, entry.sequence, peerAbortMessage(from, reason))
        }
        markBroken(e, notifyPeers = false)
        throw e
    }

    /**
     * The front's deadline for the operation recorded as [entry] (called on the watchdog's thread,
     * while this communicator's thread may be blocked inside MPI): builds the timeout, breaks the
     * communicator, prints the diagnostic, and aborts the job if configured. A non-blocking
     * operation then ends with that exception at its next poll ([ensureNotBrokenWhileInFlight]); a
     * blocking one cannot be interrupted, so with [MpiConfig.abortOnTimeout] (the default) the job
     * ends with `MPI_Abort`.
     */
    override fun deadlinePassed(entry: FlightRecorder.Entry, call: Call?) {
        if (isClosed) return
        val operation = entry.operation
        val sequence = entry.sequence
        val e = exceptionOf(
            OperationFailure.TIMEOUT,
            operation, sequence,
            "$operation did not complete within ${config.timeout} (a rank may have stalled, died, or called a different collective)" +
                if (mpiConfig.abortOnTimeout) "; calling MPI_Abort so that every rank of the job ends" else "",
        ) as CommunicationTimeoutException
        val dump = e.flightRecorderDump
        expire(entry, e, abortDetail(notifyPeers = true, MpiAbortNotices.REASON_TIMEOUT, now = mpiConfig.abortOnTimeout))
        // A caller still queued for the communicator's thread is released now; its call never starts.
        (call?.state as? MpiHandOff)?.release(e)
        System.err.println("tpcomm-mpi: rank $rank: ${e.javaClass.name}: ${e.message}\ntpcomm-mpi: flight recorder of rank $rank: $dump")
        System.err.flush()
        if (mpiConfig.abortOnTimeout) runtime.abort(handle, ABORT_CODE)
    }

    internal fun recordProfile(operation: String, nanos: Long) {
        if (!mpiConfig.profiling) return
        stats.computeIfAbsent(operation) { MpiOpProfile.Accumulator() }.add(nanos)
    }

    /** The element count of a buffer of [worldSize] blocks of [n] elements, refused beyond what one tensor dimension (and MPI's int count) holds. */
    private fun blocksCount(n: Int, operation: String, what: String): Int {
        val total = n.toLong() * worldSize
        require(total <= Int.MAX_VALUE) {
            "$operation: $what would have $worldSize x $n = $total elements, more than MPI's int count and a tensor dimension allow " +
                "(${Int.MAX_VALUE}); split the tensor into smaller ones"
        }
        return total.toInt()
    }

    /**
     * [ReduceOp.PreMulSum]'s local step (MPI has no scaled sum; [MpiAbi.op] maps it to `MPI_SUM`):
     * [apply] writes [source] times this rank's factor, each product rounded to the dtype
     * ([HostReduction.scale]), into [target], which MPI then sends. The operations call [apply]
     * inside their MPI lambda, after the signature check, so a mismatch or a bad argument leaves
     * every buffer as it was.
     */
    private class PreMul(val source: Tensor, val target: Tensor, val factor: Double) {
        fun apply() = HostReduction.scale(source.segment, target.segment, source.dtype, source.numel, factor)

        /** Returns a staging [target] to the pool once the operation succeeded (after a failure MPI may still touch it: the GC frees it). */
        fun release() {
            if (target !== source) target.close()
        }
    }

    /**
     * Null unless [op] is [ReduceOp.PreMulSum]. [inPlace]: [input] is the caller's output (allReduce's
     * tensor, the reduce root's, a rearranged copy of ours) and is scaled where it is; otherwise the
     * products go to a pooled staging buffer, so an input the caller did not give as output is never
     * written.
     */
    private fun preMul(op: ReduceOp, input: Tensor, inPlace: Boolean): PreMul? {
        if (op !is ReduceOp.PreMulSum) return null
        val target = if (inPlace) input else Tensor.zeros(input.dtype, listOf(mpiCount(input)))
        return PreMul(input, target, op.factorIn(input.dtype))
    }

    private fun addr(t: Tensor): Long = if (t.device.isGpu) t.address else t.segment.address()

    /** [t]'s element count as MPI's `int` count: the validator's `maxCount` (`Int.MAX_VALUE`) refused larger tensors. */
    private fun mpiCount(t: Tensor): Int = Math.toIntExact(t.numel)

    private fun contiguousAlong(t: Tensor, d: Int): Boolean = MpiHostWork.contiguousAlong(t, d)

    /** Rearranges [input]'s `worldSize` chunks along [d] into one dim-0 staging buffer (chunk r contiguous). */
    private fun gatherBlocksAlong(input: Tensor, d: Int): Tensor {
        val chunks = input.chunk(worldSize, d)
        val flat = chunks.map { it.view(it.numel.toInt()) }
        return Tensor.concat(flat, 0)
    }

    /** Writes the `worldSize` blocks of [staging] (each of [blockShape]) into [output] joined along [d]. */
    private fun scatterBlocksAlong(staging: Tensor, blockShape: List<Int>, output: Tensor, d: Int) {
        val blocks = staging.chunk(worldSize, 0).map { it.view(*blockShape.toIntArray()) }
        Tensor.concatInto(blocks, output, d)
    }

    internal companion object {
        const val ABORT_CODE: Int = 14

        /** Whether MPI is given CUDA device pointers ([passesDevicePointers]) under [mpiConfig] on [runtime]. */
        fun passesDevicePointers(mpiConfig: MpiConfig, runtime: MpiRuntime): Boolean = when (mpiConfig.cudaAware) {
            CudaAwareMode.Enabled -> true
            CudaAwareMode.Disabled -> false
            CudaAwareMode.Auto -> runtime.cudaSupport == 1
        }

        /** What a communicator over [binding]'s library under [mpiConfig] on [runtime] does on the host ([MpiHostWork]). */
        fun hostWorkOf(binding: MpiBinding, mpiConfig: MpiConfig, runtime: MpiRuntime): MpiHostWork =
            MpiHostWork(MpiWorkarounds(binding.abi), passesDevicePointers(mpiConfig, runtime))

        /** The operation named by the abort of a communicator whose process's program failed ([MpiRuntime.programFailed]). */
        private const val PROGRAM_FAILED: String = "program"

        /** The operation named when a peer's notice aborts a communicator between calls. */
        private const val PEER_NOTICE: String = "between calls"

        /** The monitored barrier's tag on the control duplicate (never [MpiAbortNotices.ABORT_TAG]; within the standard's minimum MPI_TAG_UB). */
        const val CONTROL_TAG: Int = 8
        const val SIG_LEN: Int = MpiSignatureProtocol.SIG_LEN
        const val SLOT_LONGS: Int = MpiSignatureProtocol.SLOT_LONGS
        const val SCRATCH_BYTES: Long = 256
        const val OFF_HANDLE: Long = 0
        const val OFF_REQUEST: Long = 8
        const val OFF_FLAG: Long = 16

        /** [markBroken]'s detail for the front's [aborting]: the notice's reason, and whether and when to send it. */
        private const val REASON_MASK: Int = 0xff
        private const val NOTIFY_PEERS: Int = 1 shl 8
        private const val NOTIFY_NOW: Int = 1 shl 9
        /** Set in every detail of this backend's, so that none equals [ABORT_FROM_FRONT]. */
        private const val DETAIL_SET: Int = 1 shl 10
    }
}
