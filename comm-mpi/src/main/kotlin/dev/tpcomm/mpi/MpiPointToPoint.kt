package dev.tpcomm.mpi

import dev.tpcomm.Communicator
import dev.tpcomm.MessageInfo
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.engine.CommunicatorFront
import dev.tpcomm.engine.OperationFailure
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.launch
import kotlin.coroutines.cancellation.CancellationException

/**
 * The point-to-point calls of one MPI communicator: sends (`MPI_Isend`; a send to this rank
 * buffered), receives that probe first and then receive exactly the probed message, probes, all as
 * non-blocking requests ([MpiPending]) polled by the communicator's thread, issued there in call
 * order. The monitored barrier's messages go through [pointToPoint] too, on the private control
 * duplicate. Arguments were checked by the front's validator.
 */
internal class MpiPointToPoint(
    private val front: CommunicatorFront,
    private val threading: MpiThreading,
    private val requests: MpiRequests,
    private val binding: MpiBinding,
    private val handle: Long,
) {
    private val rank = front.rank
    private val abi: MpiAbi = binding.abi
    private val dispatcher = threading.dispatcher
    private val failures: MpiFailures = threading.failures

    /** [send] of a validated [tensor] MPI takes as it is. */
    suspend fun runSend(entry: FlightRecorder.Entry, tensor: Tensor, dst: Int, tag: Int, handOff: MpiHandOff?) {
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
        threading.inFlight(entry) {
            dispatcher.execute {
                failures.ensureUsable(name, entry)
                failures.checkAbortNotices(name, entry)
                val p = MpiPending(requests, entry, name, MpiPending.Kind.Request, copy)
                failures.check(binding.isend(copy.segment.address(), n, abi.datatype(copy.dtype), rank, tag, handle, p.request), name, entry)
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
    suspend fun runRecv(entry: FlightRecorder.Entry, tensor: Tensor, src: Int, tag: Int, handOff: MpiHandOff?): MessageInfo {
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
            throw front.exceptionOf(OperationFailure.OTHER, 
                name, entry.sequence,
                "the message from rank ${status.source} (tag ${status.tag}) has ${status.refusedBytes} bytes but the receiving tensor " +
                    "(${tensor.dtype}${tensor.shape}) has ${tensor.byteSize} bytes; nothing was received and the message is still " +
                    "queued: receive it into a tensor of ${status.refusedBytes} bytes (probe tells the size)",
            )
        }
        return MessageInfo(status.source, status.tag, status.byteCount)
    }

    /** [probe] of a validated source and tag. */
    suspend fun probe(entry: FlightRecorder.Entry, src: Int, tag: Int): MessageInfo {
        val name = "probe"
        val mpiSrc = if (src == Communicator.ANY_SOURCE) abi.anySource else src
        val mpiTag = if (tag == Communicator.ANY_TAG) abi.anyTag else tag
        val probe = MpiStatusResult().also { it.probeSource = mpiSrc; it.probeTag = mpiTag }
        val status = pointToPoint(entry, name, null, MpiPending.Kind.Probe, null, probe) { _ -> 0 }
        return MessageInfo(status.source, status.tag, status.byteCount)
    }

    /**
     * Issues a non-blocking point-to-point call (or a probe) and waits for its status. [handOff]:
     * the front's retained tensor of the call, released once both the caller left and MPI is done
     * with [keepAlive] (null: a message of this backend's own, nothing of the front's).
     */
    suspend fun pointToPoint(
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
        val pending = threading.inFlight(entry) {
            try {
                dispatcher.execute {
                    // Cancelled while queued: never starts ([abandon] below let the tensor go).
                    if (handOff != null && !handOff.start()) throw CancellationException("$operation was cancelled before it started")
                    var handedToRequest = false
                    val p = try {
                        // The library's own check, right before the native call: the state may have changed while queued.
                        failures.ensureUsable(operation, entry)
                        failures.checkAbortNotices(operation, entry)
                        val p = MpiPending(requests, entry, operation, kind, keepAlive)
                        p.result = result
                        p.receive = receive
                        if (receive != null) {
                            p.expectedBytes = (keepAlive as Tensor).byteSize
                            requests.probes(p) // here, on the MPI thread, in issue order
                        }
                        if (kind == MpiPending.Kind.Request) {
                            failures.check(start(p.request), operation, entry)
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
        threading.inFlight(entry) { dispatcher.await(pending) }
        return result
    }
}
