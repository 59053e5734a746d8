package dev.tpcomm.mpi

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.Communicator
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.Device
import dev.tpcomm.MessageInfo
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.engine.CommunicatorBackend
import dev.tpcomm.engine.CommunicatorFront
import dev.tpcomm.engine.DeadlineWatchdog
import dev.tpcomm.engine.ExactReduction
import dev.tpcomm.engine.NativeDispatcher
import dev.tpcomm.engine.OperationCall
import dev.tpcomm.engine.OperationFailure
import dev.tpcomm.engine.SignatureCheck
import dev.tpcomm.spi.CollectiveOp
import dev.tpcomm.spi.CollectiveValidator
import dev.tpcomm.spi.CommunicationErrors
import dev.tpcomm.spi.MonitoredBarrier
import dev.tpcomm.spi.MonitoredBarrierChannel
import kotlinx.coroutines.CoroutineDispatcher
import kotlinx.coroutines.runBlocking
import java.lang.foreign.Arena
import kotlin.coroutines.EmptyCoroutineContext

/**
 * The MPI backend composed into an MPI communicator's [CommunicatorFront] (the user holds its
 * [MpiCommunicator] handle): how each operation is issued and completed on MPI, how point-to-point
 * messages move, how the communicator aborts (notices to the peers, `MPI_Abort` with
 * `abortOnTimeout`) and shuts down (`MPI_Comm_free`, the last one `MPI_Finalize`). Its parts, each
 * a file: [MpiFailures], [MpiNativeCalls], [MpiConsistencyCheck], [MpiRequests], [MpiThreading],
 * [MpiCollectives], [MpiPointToPoint], [MpiGroups], [MpiDeviceStaging]. Thread-safe as the front's
 * hooks require.
 */
internal class MpiBackend(
    internal val runtime: MpiRuntime,
    internal val binding: MpiBinding,
    internal val handle: Long,
    /** A duplicate of [handle] carrying only abort notices between ranks ([MpiAbortNotices]). */
    private val controlHandle: Long,
    val rank: Int,
    val worldSize: Int,
    /** The configuration this communicator was created with. */
    val config: CommConfig,
    /** The MPI settings in effect. */
    val mpiConfig: MpiConfig,
    private val dispatcher: NativeDispatcher,
    /** False when [dispatcher] is the process's one MPI thread, shared below `MPI_THREAD_MULTIPLE`. */
    private val ownsDispatcher: Boolean,
    val name: String,
    /**
     * The largest tag [send], [recv] and [probe] accept: the communicator's `MPI_TAG_UB` attribute
     * (MPICH 4.0 with ch4:ucx: 2^28 - 1; Open MPI 4.1: 2^31 - 1; at least 32767 by the standard).
     */
    val tagUpperBound: Int = 32767,
) : CommunicatorBackend() {
    // The front this backend is composed into (it attaches itself: [front]); nothing of this
    // backend runs before its parts below exist, since only the front calls it.
    init {
        CommunicatorFront(
            rank, worldSize, Device.Host, "mpi",
            FlightRecorder(
                config.flightRecorderSize, rank, "mpi", timing = mpiConfig.profiling, worldSize = worldSize, communicator = FlightRecorder.safeId(name), dumpDirectory = config.flightRecorderDir,
                // Without profiling, start times come from the watchdog's scans: no clock read per operation.
                clock = if (mpiConfig.profiling) FlightRecorder.NanoClock.SYSTEM else DeadlineWatchdog.coarseClock,
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
            // One small exchange per collective: compared unless checkConsistency is set to false.
            SignatureCheck.ByDefault, config.checkConsistency,
            // split, group and duplicate: the creation's deadline, not an operation's.
            config.effectiveCreationTimeout,
            backend = this,
        )
    }

    internal val abi: MpiAbi = binding.abi
    private val arena: Arena = Arena.ofShared()
    private val deviceTensors: Boolean = passesDevicePointers(mpiConfig, runtime)
    private val workarounds = MpiWorkarounds(binding.abi)

    /**
     * Which device tensors go to MPI directly, and what runs on the host around MPI calls: for
     * [staging] and the run paths' guard (the validator refuses host work first, see the constructor).
     */
    private val hostWork = MpiHostWork(workarounds, deviceTensors)

    // The backend's parts, each knowing only those before it (one way): how it fails, its blocking
    // MPI calls, the consistency check, its requests in flight, where calls run, then the
    // operations themselves.
    private val notices = MpiAbortNotices(binding, controlHandle, rank, worldSize, arena, runtime::whileMpiOpen)
    private val failures = MpiFailures(front, notices, runtime, binding, dispatcher, handle, config.timeout, mpiConfig.abortOnTimeout, config.effectiveCreationTimeout)
    private val calls = MpiNativeCalls(failures, arena, mpiConfig.profiling)
    private val blockingMode: Boolean = mpiConfig.effectiveProgress == MpiProgress.Blocking

    /** The front's [checksSignatures]; the exchange carries small collectives in blocking progress only ([MpiConsistencyCheck.slotsCarry]). */
    private val check =
        MpiConsistencyCheck(front, calls, binding, handle, dispatcher, arena, front.checksSignatures, slotsCarry = front.checksSignatures && blockingMode, front::compareSignatures)
    private val requests = MpiRequests(binding, handle, runtime, failures, calls)
    private val threading = MpiThreading(front, dispatcher, check, requests, blockingMode, ownsDispatcher, mpiConfig.callerRunsLimit, name)
    private val collectives = MpiCollectives(threading, binding, handle, rank, worldSize, workarounds, hostWork)
    private val messages = MpiPointToPoint(front, threading, requests, binding, handle)
    private val groups = MpiGroups(threading, runtime, binding, handle, config, mpiConfig, name)
    private val staging = MpiDeviceStaging(front, collectives, messages, failures, hostWork, runtime, cudaAwarenessOf(runtime, mpiConfig))

    /**
     * How the process's [MpiCommunicators] see this communicator. Not the communicator itself:
     * [programFailed] breaks it, so it must not be a public member a user could call.
     */
    private val watched = object : MpiCommunicators.Member {
        // An aborted communicator's leftover operations are abandoned (their peers were told);
        // only a usable communicator's operation in progress makes a shutdown a failure.
        override fun describeActiveCall(): String? {
            if (front.isAborted) return null
            calls.blockedIn()?.let { return "$it #${calls.blockedSequence()} on $name" }
            val n = requests.inFlightOps
            return if (n > 0) "$n non-blocking operation(s) on $name" else null
        }
        override fun pollPeerNotices() {
            // Only where MPI allows a second thread; below MPI_THREAD_MULTIPLE the communicator's own
            // thread tests the notices before its calls.
            failures.pollPeerNotices(calls::blockedIn, calls::blockedSequence)
        }
        override fun programFailed(description: String) = failures.programFailed(description)
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

    /** Whether device (CUDA) tensors are handed to MPI directly (CUDA-aware MPI). */
    val passesDevicePointers: Boolean get() = deviceTensors

    /** The communicator's thread as a coroutine dispatcher ([MpiCommunicator.nativeDispatcher]). */
    val nativeDispatcher: CoroutineDispatcher get() = dispatcher

    /** See [MpiCommunicator.profile]. */
    fun profile(): Map<String, MpiOpProfile> = calls.profile()

    // ------------------------------------------------------------------ what the front asks of MPI

    /** The front recorded the communicator's failure: [MpiFailures.aborting] tells the peers as [detail] says. */
    override fun aborting(cause: Throwable, detail: Int): Unit = failures.aborting(detail)

    /** The front's deadline for the operation recorded as [entry]: see [MpiFailures.deadlinePassed]. */
    override fun deadlinePassed(entry: FlightRecorder.Entry, call: OperationCall?): Unit = failures.deadlinePassed(entry, call)

    /**
     * The small blocking all-reduces and broadcasts run to completion here, without suspending:
     * on this communicator's thread when the caller is on it (the fast path), or on the caller's
     * thread when caller-runs allows it ([MpiThreading.runsHere]). Everything else runs in [await].
     */
    override fun issue(call: OperationCall): Any? {
        if (!blockingMode) return CommunicatorFront.PENDING
        val tensor = call.input ?: return CommunicatorFront.PENDING
        return when (call.op) {
            CollectiveOp.AllReduce -> {
                val op = call.reduceOp!!
                if (call.extra === ExactReduction) {
                    return if (threading.runsHere(call, tensor) { collectives.exactReductionBlocking(call, tensor, op, -1) }) tensor else CommunicatorFront.PENDING
                }
                if (staging.needed(tensor) || workarounds.hostReduced(tensor.dtype, op)) return CommunicatorFront.PENDING
                if (threading.runsHere(call, tensor) { collectives.allReduceBlocking(call, tensor, op) }) tensor else CommunicatorFront.PENDING
            }
            CollectiveOp.Broadcast -> {
                if (staging.needed(tensor)) return CommunicatorFront.PENDING
                if (threading.runsHere(call, tensor) { collectives.broadcastBlocking(call, tensor, call.root) }) tensor else CommunicatorFront.PENDING
            }
            else -> CommunicatorFront.PENDING
        }
    }

    /**
     * Runs what [issue] did not, after the front validated, recorded and retained it: on the
     * caller's thread, on this communicator's thread, or handed from one to the other
     * ([MpiThreading.collective]). Device tensors MPI is not given directly go through [staging]
     * (host temporaries), the others straight to MPI.
     */
    override suspend fun await(call: OperationCall): Any? {
        try {
            return run(call)
        } finally {
            // The caller's side of a hand-off ([MpiThreading.handOver]): its tensors are released once MPI is done too.
            (call.state as? MpiHandOff)?.callerLeft()
        }
    }

    /** [await]'s work: the operation's MPI calls, directly or through [staging]. */
    private suspend fun run(call: OperationCall): Any? {
        val input = call.input
        val output = call.output
        val staged = staging.needed(input) || staging.needed(output)
        if (call.extra === ExactReduction) return collectives.runExactReduction(call, input!!, call.reduceOp!!, if (call.op == CollectiveOp.Reduce) call.root else -1)
        return when (call.op) {
            CollectiveOp.AllReduce ->
                if (staged) staging.allReduce(call, input!!, call.reduceOp!!) else collectives.runAllReduce(call, input!!, call.reduceOp!!)
            CollectiveOp.Broadcast ->
                if (staged) staging.broadcast(call, input!!, call.root) else collectives.runBroadcast(call, input!!, call.root)
            CollectiveOp.Reduce ->
                if (staged) staging.reduce(call, input!!, call.root, call.reduceOp!!) else collectives.runReduce(call, input!!, call.root, call.reduceOp!!)
            CollectiveOp.AllGather ->
                if (staged) staging.allGatherInto(call, output!!, input!!, call.dim) else collectives.runAllGather(call, output!!, input!!, call.dim)
            CollectiveOp.ReduceScatter ->
                if (staged) {
                    staging.reduceScatterInto(call, output!!, input!!, call.reduceOp!!, call.dim)
                } else {
                    collectives.runReduceScatter(call, output!!, input!!, call.reduceOp!!, call.dim)
                }
            // The root's output is the front's (a host tensor, also for a staged device input).
            CollectiveOp.Gather ->
                if (staging.needed(input)) staging.gather(call, input!!, call.root, call.dim, output) else collectives.runGather(call, input!!, call.root, call.dim, output)
            // The input is the root's only (the front passes null elsewhere).
            CollectiveOp.Scatter ->
                if (staged) staging.scatter(call, output!!, input, call.root, call.dim) else collectives.runScatter(call, output!!, input, call.root, call.dim)
            CollectiveOp.AllToAll ->
                if (staging.needed(input)) staging.allToAll(call, input!!, call.dim, output!!) else collectives.runAllToAll(call, input!!, call.dim, output!!)
            // Host tensors only: the validator refuses device ones (unevenDeviceRefusal).
            CollectiveOp.AllGatherV -> collectives.runAllGatherV(call, output!!, input!!, call.sizes!!)
            CollectiveOp.ReduceScatterV -> collectives.runReduceScatterV(call, output!!, input!!, call.sizes!!, call.reduceOp!!)
            CollectiveOp.AllToAllV -> collectives.runAllToAllV(call, output!!, input!!, call.sizes!!, call.outputSizes!!)
            CollectiveOp.Barrier -> collectives.runBarrier(call)
            CollectiveOp.Split -> {
                val e = call.extra as IntArray
                groups.runSplit(call, if (e[0] == 0) null else e[1], e[2])
            }
            CollectiveOp.Group -> {
                val position = (call.extra as List<*>).indexOf(rank)
                groups.runSplit(call, if (position >= 0) 0 else null, if (position >= 0) position else 0)
            }
            CollectiveOp.Duplicate -> groups.runDuplicate(call)
            else -> error("${call.name} is not a collective of the front")
        }
    }

    /**
     * A send of the front's retained [tensor]: handed over ([MpiHandOff]) before it goes to the
     * communicator's thread, so that it stays retained while MPI may read it, also after its caller left.
     */
    override suspend fun issueSend(entry: FlightRecorder.Entry, tensor: Tensor, dst: Int, tag: Int) {
        val handOff = threading.handOver(entry, tensor)
        try {
            if (staging.needed(tensor)) staging.send(entry, tensor, dst, tag, handOff) else messages.runSend(entry, tensor, dst, tag, handOff)
        } finally {
            handOff.callerLeft()
        }
    }

    /** A receive into the front's retained [tensor], handed over as [issueSend]'s. */
    override suspend fun issueRecv(entry: FlightRecorder.Entry, tensor: Tensor, src: Int, tag: Int): MessageInfo {
        val handOff = threading.handOver(entry, tensor)
        try {
            return if (staging.needed(tensor)) staging.recv(entry, tensor, src, tag, handOff) else messages.runRecv(entry, tensor, src, tag, handOff)
        } finally {
            handOff.callerLeft()
        }
    }

    override suspend fun issueProbe(entry: FlightRecorder.Entry, src: Int, tag: Int): MessageInfo = messages.probe(entry, src, tag)

    /** The front's [monitoredBarrier] runs the core's [MonitoredBarrier] over [control]. */
    override val monitoredBarrierChannel: MonitoredBarrierChannel get() = control

    /** `CommConfig.reproducibleReductions`: the front's default for floating-point sums (docs/reproducible.md). */
    override val reproducibleReductions: Boolean get() = config.reproducibleReductions

    /**
     * The small reproducible all-reduces and reduces ([gathers]): one `MPI_Allgather` (or
     * `MPI_Gather` to the root) of the inputs, then [dev.tpcomm.engine.ExactSum] on the host
     * ([MpiCollectives.runExactReduction]): the composite's data movement and bits as one operation
     * (one record, one consistency check). Larger ones stay the composite (`allToAll`, then
     * `allGather`: a ring's bytes). Device tensors never come here.
     */
    override fun reducesExactly(tensor: Tensor, gathers: Boolean): Boolean = gathers && !staging.needed(tensor)

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
        override val errors: CommunicationErrors get() = front.errors
        override val concurrentReceives: Boolean get() = true
        override val callTimeout: kotlin.time.Duration get() = config.timeout

        override suspend fun send(value: Long, dst: Int) {
            val name = MonitoredBarrier.OPERATION
            val t = Tensor.of(longArrayOf(value))
            val entry = front.beginPointToPoint(name, t, dst, CONTROL_TAG)
            val buf = t.segment.address(); val type = abi.datatype(t.dtype)
            front.recorded(entry) { messages.pointToPoint(entry, name, t, MpiPending.Kind.Request, null) { r -> binding.isend(buf, 1, type, dst, CONTROL_TAG, controlHandle, r) } }
        }

        override suspend fun recv(src: Int): Long {
            val name = MonitoredBarrier.OPERATION
            val t = Tensor.zeros(dev.tpcomm.DType.Int64, 1)
            val entry = front.beginPointToPoint(name, t, src, CONTROL_TAG)
            val buf = t.segment.address(); val type = abi.datatype(t.dtype)
            val receive = { r: Long, from: Int, withTag: Int -> binding.irecv(buf, 1, type, from, withTag, controlHandle, r) }
            val probe = MpiStatusResult().also { it.probeSource = src; it.probeTag = CONTROL_TAG; it.probeHandle = controlHandle }
            return front.recorded(entry) {
                val status = messages.pointToPoint(entry, name, t, MpiPending.Kind.Probe, null, probe, receive) { _ -> 0 }
                if (status.refusedBytes >= 0) {
                    throw front.exceptionOf(OperationFailure.OTHER, name, entry.sequence, "rank ${status.source} sent a message of ${status.refusedBytes} bytes where an 8-byte token was expected")
                        .also { failures.markBroken(it) }
                }
                t.getLong(0)
            }
        }

        override fun ensureUsable() {
            failures.ensureUsable(MonitoredBarrier.OPERATION, null)
        }

        override fun abort(cause: CommunicationException) {
            failures.markBroken(cause, notifyPeers = false)
        }
    }

    // ------------------------------------------------------------------ groups

    // ------------------------------------------------------------------ lifecycle

    /**
     * Frees the MPI communicator (`MPI_Comm_free`) on its thread, ends the thread, and, when this
     * is the last MPI communicator of the process, calls `MPI_Finalize`. Idempotent. A broken
     * communicator or one with operations in flight is not freed (MPI may still use it).
     */
    override fun shutdown() {
        runtime.communicators.unregister(watched)
        val free = !front.isAborted && requests.inFlightOps == 0 && !runtime.finalized
        try {
            if (!dispatcher.isClosed) {
                runBlocking {
                    dispatcher.execute {
                        if (free) {
                            notices.retire()
                            abi.writeHandle(calls.scratch, MpiNativeCalls.OFF_HANDLE, handle)
                            binding.commFree(calls.scratchAddress + MpiNativeCalls.OFF_HANDLE)
                            abi.writeHandle(calls.scratch, MpiNativeCalls.OFF_HANDLE, controlHandle)
                            binding.commFree(calls.scratchAddress + MpiNativeCalls.OFF_HANDLE)
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

    override fun toString(): String = "MpiBackend($name, rank $rank of $worldSize, ${runtime.implementation})"

    internal companion object {
        /** The exit code of a job this library ends ([MpiFailures.ABORT_CODE]). */
        const val ABORT_CODE: Int = MpiFailures.ABORT_CODE

        /** Whether MPI is given CUDA device pointers ([passesDevicePointers]) under [mpiConfig] on [runtime]. */
        fun passesDevicePointers(mpiConfig: MpiConfig, runtime: MpiRuntime): Boolean = when (mpiConfig.cudaAware) {
            CudaAwareMode.Enabled -> true
            CudaAwareMode.Disabled -> false
            CudaAwareMode.Auto -> runtime.cudaSupport == 1
        }

        /** What a communicator over [binding]'s library under [mpiConfig] on [runtime] does on the host ([MpiHostWork]). */
        fun hostWorkOf(binding: MpiBinding, mpiConfig: MpiConfig, runtime: MpiRuntime): MpiHostWork =
            MpiHostWork(MpiWorkarounds(binding.abi), passesDevicePointers(mpiConfig, runtime))

        /** How the CUDA-awareness was decided, for messages. */
        fun cudaAwarenessOf(runtime: MpiRuntime, mpiConfig: MpiConfig): String =
            "MPIX_Query_cuda_support ${if (runtime.cudaSupport < 0) "is missing" else "returned ${runtime.cudaSupport}"}; mpi.cudaAware=${mpiConfig.cudaAware}"

        /** The monitored barrier's tag on the control duplicate (never [MpiAbortNotices.ABORT_TAG]; within the standard's minimum MPI_TAG_UB). */
        const val CONTROL_TAG: Int = 8
        const val SIG_LEN: Int = MpiConsistencyCheck.SIG_LEN
        const val SLOT_LONGS: Int = MpiConsistencyCheck.SLOT_LONGS
    }
}
