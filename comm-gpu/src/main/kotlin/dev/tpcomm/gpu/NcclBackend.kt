package dev.tpcomm.gpu

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
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.engine.CommunicatorBackend
import dev.tpcomm.engine.CommunicatorFront
import dev.tpcomm.engine.NativeDispatcher
import dev.tpcomm.engine.OperationCall
import dev.tpcomm.engine.OperationFailure
import dev.tpcomm.engine.SignatureCheck
import dev.tpcomm.spi.CommunicationErrors
import dev.tpcomm.spi.MonitoredBarrier
import dev.tpcomm.spi.MonitoredBarrierChannel
import dev.tpcomm.spi.ObjectProtocol
import dev.tpcomm.spi.ObjectTransport
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import kotlin.coroutines.EmptyCoroutineContext

/**
 * The GPU engine composed into a `nccl` or `rccl` communicator's [CommunicatorFront] (the user holds
 * its [NcclCommunicator] handle): how each operation is issued on the device's thread and completed
 * by its stream event, how point-to-point messages and batches move, how the communicator aborts
 * (`ncclCommAbort`) and shuts down. This class composes its parts and passes each what it needs;
 * none calls back into it: the operation engine ([NcclOperationQueue]), each collective's device
 * part ([nativePart], `DeviceLaunches`, [splitOnDevice], `ConsistencyCheck`), the `ncclComm_t`'s
 * lifecycle ([NcclCommHandle]), named failures ([NcclFailures]), stream resources
 * ([StreamResources]), the point-to-point window ([PointToPointWindow]) and the staged object
 * transport ([StagedObjectTransport]). Thread-safe as the front's hooks require.
 */
internal class NcclBackend(
    /** The library as every communicator uses it; this one's calls go through [api]. */
    private val library: NcclApi,
    private val runtime: DeviceRuntime,
    private val thread: DeviceThread,
    private val comm: Long,
    private val stream: Long,
    val rank: Int,
    val worldSize: Int,
    val device: Device,
    val backendName: String,
    private val config: CommConfig,
    /** The library's version code as `ncclGetVersion` reports it (e.g. 23007 for 2.30.7). */
    val libraryVersionCode: Int,
    private val commConfig: NcclCommConfig,
    private val onClose: AutoCloseable? = null,
    /** The world this communicator belongs to, equal on all its ranks and different from every other world's ([DeviceThread.orderAcross]). */
    worldKey: Any = Any(),
) : CommunicatorBackend() {
    // The front this backend is composed into (it attaches itself: [front]); nothing of this
    // backend runs before its parts below exist, since only the front calls it.
    init {
        CommunicatorFront(
            rank, worldSize, device, backendName,
            FlightRecorder(config.flightRecorderSize, rank, backendName, worldSize = worldSize, dumpDirectory = config.flightRecorderDir),
            // The core's one argument check, run first by every operation, with what NCCL/RCCL cannot do
            // (dtypes, reductions, tags, ANY_SOURCE, messages to oneself) declared as its capabilities.
            NcclLimits(library, backendName, libraryVersionCode).validator(worldSize, rank, device),
            config.timeout,
            // The check's exchange waits for the stream: compared only when checkConsistency is set to true.
            SignatureCheck.OnRequest, config.checkConsistency,
            // split and group: the creation's deadline, not an operation's.
            config.effectiveCreationTimeout,
            backend = this,
        )
    }

    private val dispatcher: NativeDispatcher = thread.dispatcher
    private val deviceIndex = deviceIndex(device)
    private val timeoutNanos = config.timeout.inWholeNanoseconds
    /** The `ncclComm_t`'s lifecycle: first failure, close, abort and release. */
    /** The library as this communicator calls it: calls on [comm] serialised with its release, none after it (issue 35, finding 4). */
    private val guard = CommCallGuard(library, comm)
    private val api: NcclApi = guard
    private val handle = NcclCommHandle(guard, comm, thread, backendName, timeoutNanos, { front.failure ?: if (front.isClosed) front.closedException() else null }, { front.abortWith(it) })

    /** The named exceptions of failures on the device. */
    private val failures = NcclFailures(api, runtime, comm, config.timeout, { f, op, seq -> front.exceptionOf(f, op, seq) }, { front.abortedMessage(it) }, config.effectiveCreationTimeout)
    /** Events, producer ordering, scratch and staging of [stream] (native thread only). */
    private val resources = StreamResources(runtime, stream, deviceIndex)
    /** The point-to-point window (an open group on the device's thread) of this communicator. */
    private val p2p = PointToPointWindow(api, thread, handle, failures)
    /** What this communicator's operations issue with. */
    private val opContext = NcclOpContext(api, runtime, thread, comm, stream, rank, worldSize, backendName, libraryVersionCode, handle, failures, resources, worldKey)

    /**
     * The operation engine: the device's issue order, each operation's native part, deadlines,
     * reserved outputs and the aborts of callers that gave up.
     */
    private val queue = NcclOperationQueue(
        opContext, p2p, device, deviceIndex, checkConsistency = front.checksSignatures,
        front,
    )

    /**
     * The front's deadline, timed from the call on the core's `DeadlineWatchdog` thread: the
     * operation fails with [CommunicationTimeoutException] and the communicator is aborted
     * (`ncclCommAbort`), also when the operation never reached the native thread
     * ([NcclOperationQueue.deadlinePassed]).
     */
    override fun deadlinePassed(entry: FlightRecorder.Entry, call: OperationCall?) {
        queue.deadlinePassed(entry, call)
    }

    /** [NcclCommunicator.producerStream]. */
    @Volatile
    var producerStream: Long = NcclCommunicator.LEGACY_DEFAULT_STREAM

    /** The library's name as [api] reports it (`NCCL`, `RCCL`). */
    val libraryName: String get() = api.libraryName

    // ---------------------------------------------------------------- the front's hooks

    /** Calls wait for the device's native thread (shared by every communicator of the device): recorded as queued until it starts them. */
    override val queuesCalls: Boolean get() = true

    /**
     * Device memory for the output of the allocating collective [call], allocated on this
     * communicator's stream by an operation that takes the call's place in the device's issue order
     * now, at the call (docs/nccl-semantics.md N17); freed when the tensor becomes unreachable
     * ([DeviceFree]), unless the call failed after it was issued ([NcclOperationQueue.allocate]).
     */
    override suspend fun allocate(call: OperationCall, dtype: DType, shape: List<Int>): Tensor =
        queue.allocate(call, producerStream, dtype, shape)

    /**
     * Checks what NCCL/RCCL add to the front's validation ([IllegalArgumentException], nothing
     * issued), then queues [call]'s native part ([nativePart]) on the device's thread (or hands it to
     * the operation [allocate] queued for it); the caller waits in [await].
     */
    override fun issue(call: OperationCall): Any? {
        val body = try {
            nativePart(call, opContext, commConfig, ::child)
        } catch (t: Throwable) {
            queue.refused(call) // refused: the operation [allocate] queued for it gives up its place at once
            throw t
        }
        queue.issue(call, body, producerStream)
        return CommunicatorFront.PENDING
    }

    /**
     * The front gave up on [call] before issuing it: the operation [allocate] queued for it gives up
     * its place at once (the front then aborts the communicator: NCCL pairs calls by their order).
     */
    override fun notIssued(call: OperationCall, cause: Throwable) {
        queue.refused(call)
    }

    /** The front recorded the communicator's failure: `ncclCommAbort` ([NcclCommHandle.aborted]). */
    override fun aborting(cause: Throwable, detail: Int) {
        handle.aborted()
    }

    override suspend fun await(call: OperationCall): Any? = queue.finish(call.state as NcclOp)

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

    /** `CommConfig.reproducibleReductions`: the front's default for floating-point sums (docs/reproducible.md). */
    override val reproducibleReductions: Boolean get() = config.reproducibleReductions

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
        override val errors: CommunicationErrors get() = front.errors
        override val concurrentReceives: Boolean get() = false
        override val callTimeout: kotlin.time.Duration get() = config.timeout

        override suspend fun send(value: Long, dst: Int) {
            objects.sendLength(MonitoredBarrier.OPERATION, value, dst, 0)
        }

        override suspend fun recv(src: Int): Long = objects.recvLength(MonitoredBarrier.OPERATION, src, 0).first

        override fun ensureUsable() {
            (front.failure ?: if (front.isClosed) front.closedException() else null)?.let { throw front.exceptionOf(front.abortedFailure(it), MonitoredBarrier.OPERATION, CommunicationErrors.NO_SEQUENCE) }
        }

        override fun abort(cause: CommunicationException) {
            front.abortWith(cause)
        }
    }

    /** The object collectives' bytes, staged through temporary device buffers on this communicator's stream. */
    private val objects = StagedObjectTransport(rank, worldSize, object : StagedObjectTransport.Operations {
        override suspend fun <T> collective(operation: String, root: Int, body: NcclOp.() -> T): T = own(front.beginOwnCollective(operation, root), issue = body)
        override suspend fun <T> pointToPoint(operation: String, peer: Int, tag: Int, body: NcclOp.() -> T): T = own(front.beginPointToPoint(operation, null, peer, tag), issue = body)
    })

    // ---------------------------------------------------------------- point to point

    override suspend fun issueSend(entry: FlightRecorder.Entry, tensor: Tensor, dst: Int, tag: Int) {
        val o = NcclOp(opContext, entry, producerStream, p2p = true)
        queue.start(o) { nccl(api.send(tensor.address, tensor.byteSize, BYTES, dst, comm, stream), "ncclSend") }
        queue.finish(o)
    }

    override suspend fun issueRecv(entry: FlightRecorder.Entry, tensor: Tensor, src: Int, tag: Int): MessageInfo {
        val o = NcclOp(opContext, entry, producerStream, p2p = true)
        queue.start(o) { nccl(api.recv(tensor.address, tensor.byteSize, BYTES, src, comm, stream), "ncclRecv") }
        queue.finish(o)
        return MessageInfo(src, 0, tensor.byteSize)
    }

    /** Never called: NCCL has no probe, so the front's validator refuses every probe first ([NcclLimits]). */
    override suspend fun issueProbe(entry: FlightRecorder.Entry, src: Int, tag: Int): MessageInfo =
        throw IllegalStateException("probe reached the $backendName engine although its validator refuses it (NcclLimits.noProbeReason)")

    /** A [sendRecv] batch is one NCCL group ([issueGroupedBatch]). */
    override val groupsBatches: Boolean get() = true

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
    override suspend fun issueGroupedBatch(entry: FlightRecorder.Entry, ops: List<PointToPoint>): List<MessageInfo> {
        val op = NcclOp(opContext, entry, producerStream)
        queue.start(op) {
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
        queue.finish(op)
        return ops.map { MessageInfo(it.peer, 0, it.tensor.byteSize) }
    }

    /**
     * Orders every call issued after this one after [event] (a `cudaEvent_t`/`hipEvent_t` the caller
     * recorded on its own stream, e.g. after the kernel that writes the next input): one
     * `cudaStreamWaitEvent` on the communicator's stream, no host synchronisation. The per-call
     * counterpart of [producerStream]. Cancellation and failure as for a collective.
     */
    suspend fun waitEvent(event: Long) {
        require(event != 0L) { "waitEvent: pass a recorded event, got NULL" }
        own(front.beginOwnCollective("waitEvent"), onStream = false, paired = false) {
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
                if (!handle.isReleased) handle.release(abort = true, waitNanos = timeoutNanos)
            }
        }
        if (done.count == 0L) thread.release(timeoutNanos) // a thread still blocked is left running (daemon) rather than joined forever
        runCatching { onClose?.close() }
    }

    /** A child of a split (or group) sharing this device's native thread: one launch order per device (SharedDispatcher). */
    private fun child(childComm: Long, childStream: Long, childRank: Int, childWorldSize: Int, world: Any): NcclCommunicator =
        NcclCommunicator(
            library, runtime, thread.retain(), childComm, childStream, childRank, childWorldSize, device, backendName,
            config.copy(worldSize = childWorldSize, rank = childRank, localRank = config.localRank),
            libraryVersionCode, commConfig, worldKey = world,
        )

    override fun toString(): String = "NcclBackend($backendName rank $rank of $worldSize on $device)"

    // ---------------------------------------------------------------- machinery

    /** An operation the backend runs itself ([entry] from [beginOwnCollective] or [beginPointToPoint]): issued as the front's, recorded by [recorded]. */
    /**
     * The reproducible reductions' copy between a device tensor and host memory: on this
     * communicator's stream, after the work issued before it, waited for; recorded as a step of the
     * composite in flight (every rank makes it), paired with no peer.
     */
    override suspend fun hostCopy(tensor: Tensor, host: java.lang.foreign.MemorySegment, toHost: Boolean) {
        if (!tensor.device.isGpu) return super.hostCopy(tensor, host, toHost)
        own(front.beginOwnCollective(if (toHost) "copyToHost" else "copyToDevice"), paired = false) {
            val n = tensor.byteSize
            if (n > 0) {
                val kind = if (toHost) DeviceRuntime.MEMCPY_DEVICE_TO_HOST else DeviceRuntime.MEMCPY_HOST_TO_DEVICE
                cuda(runtime.memcpyAsync(if (toHost) host.address() else tensor.address, if (toHost) tensor.address else host.address(), n, kind, stream), "memcpyAsync")
            }
            awaitStream()
        }
    }

    private suspend fun <T> own(entry: FlightRecorder.Entry, onStream: Boolean = true, paired: Boolean = true, issue: NcclOp.() -> T): T = front.recorded(entry) {
        val o = NcclOp(opContext, entry, producerStream, onStream, paired = paired)
        queue.start(o, issue)
        @Suppress("UNCHECKED_CAST")
        queue.finish(o) as T
    }

    private fun nativeClose() {
        val busy = queue.busy
        // A window open on the device's thread (this communicator's or another's) ends first: a
        // finalize or abort issued inside it would join that group (docs/nccl-semantics.md N10, N12).
        thread.p2pOwner?.endP2pWindow()
        val healthy = !busy && front.failure == null
        handle.release(abort = !healthy)
        // Page-locked memory is freed after the stream's work, off this thread (cudaFreeHost synchronises
        // the device); after a failure the device may still write it, so it is left to the process.
        resources.release(healthy)
        // Its cached output blocks are freed; the stream is destroyed once its outputs still alive were freed on it.
        thread.retireStream(stream)
    }
}

internal fun deviceIndex(device: Device): Int = when (device) {
    is Device.Cuda -> device.index
    is Device.Rocm -> device.index
    Device.Host -> throw IllegalArgumentException("a GPU communicator needs a GPU device, got $device")
}
