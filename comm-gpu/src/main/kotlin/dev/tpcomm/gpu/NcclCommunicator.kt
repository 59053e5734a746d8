package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.Communicator
import dev.tpcomm.Device
import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.MessageInfo
import dev.tpcomm.PointToPoint
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.FlightRecorded
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.engine.CommunicatorFront
import dev.tpcomm.engine.FrontHandle
import dev.tpcomm.engine.NativeDispatcher

/**
 * A [Communicator] over NCCL's API ([NcclApi]) and a GPU runtime ([DeviceRuntime]): the
 * stream-ordered engine shared by the `nccl` and `rccl` backends, behind the common
 * front (which validates, numbers, records, retains and names every failure; the engine issues
 * on the device and reports its failures).
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
 * **Shape.** This class is a handle: every [Communicator] operation goes through the library's one
 * front (validation, call order, records, deadlines, failure, close), into which the GPU engine is
 * composed; the members declared here are the engine's extras, reachable on any [Communicator]
 * too ([dev.tpcomm.gpu.producerStream], [dev.tpcomm.gpu.waitEvent]).
 *
 * Thread-safety: every method may be called from any thread or coroutine.
 */
public class NcclCommunicator private constructor(
    /** The front every operation goes through; the GPU engine is composed into it. */
    @property:InternalTpcommApi override val front: CommunicatorFront,
    internal val backend: NcclBackend,
) : Communicator by front, FlightRecorded, FrontHandle {
    internal constructor(backend: NcclBackend) : this(backend.front, backend)

    internal constructor(
        library: NcclApi, runtime: DeviceRuntime, thread: DeviceThread, comm: Long, stream: Long, rank: Int, worldSize: Int, device: Device,
        backendName: String, config: CommConfig, libraryVersionCode: Int, commConfig: NcclCommConfig, onClose: AutoCloseable? = null, worldKey: Any = Any(),
    ) : this(NcclBackend(library, runtime, thread, comm, stream, rank, worldSize, device, backendName, config, libraryVersionCode, commConfig, onClose, worldKey))

    override val flightRecorder: FlightRecorder get() = front.flightRecorder

    /** The library's version code as `ncclGetVersion` reports it (e.g. 23007 for 2.30.7); [libraryVersion] is its text. */
    public val libraryVersionCode: Int get() = backend.libraryVersionCode

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
    public var producerStream: Long
        get() = backend.producerStream
        set(value) {
            backend.producerStream = value
        }

    /**
     * The library and its version as text, e.g. `NCCL 2.30.7` (a String on every backend, as MPI's
     * `MPI_Get_library_version`); compare versions with [libraryVersionCode].
     */
    public val libraryVersion: String get() = "${backend.libraryName} ${NcclVersion.format(backend.libraryVersionCode)}"

    /** True once [close] ran on this rank. Thread-safe. */
    public val isClosed: Boolean get() = front.isClosed

    /** The JSON dump of this communicator's recent operations (see [FlightRecorder.dumpJson]). */
    public fun flightRecorderDump(): String = front.flightRecorder.dumpJson()

    /**
     * Sends [send] to [dst] and receives [recv] from [src] as **one** NCCL group
     * (`ncclGroupStart`; `ncclSend`; `ncclRecv`; `ncclGroupEnd`), so the two progress together: the
     * way to write ring and pairwise exchanges on NCCL (NVIDIA/nccl
     * `docs/userguide/source/usage/p2p.rst`:17-24: calls that must progress concurrently must be in one
     * group, or they may deadlock). Same checks and failure rules as [send] and [recv].
     */
    public suspend fun sendRecv(send: Tensor, dst: Int, recv: Tensor, src: Int): MessageInfo {
        front.sendRecv(listOf(PointToPoint.send(send, dst), PointToPoint.recv(recv, src)))
        return MessageInfo(src, 0, recv.byteSize)
    }

    /**
     * Orders every call issued after this one after [event] (a `cudaEvent_t`/`hipEvent_t` the caller
     * recorded on its own stream, e.g. after the kernel that writes the next input): one
     * `cudaStreamWaitEvent` on the communicator's stream, no host synchronisation, recorded as the
     * front's own operation (`waitEvent`). The per-call counterpart of [producerStream].
     * Cancellation and failure as for a collective.
     */
    public suspend fun waitEvent(event: Long) {
        backend.waitEvent(event)
    }

    override fun toString(): String = "NcclCommunicator(${backend.backendName} rank $rank of $worldSize on $device)"

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
