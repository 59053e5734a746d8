package dev.tpcomm.mpi

import dev.tpcomm.CommunicationException
import dev.tpcomm.Device
import dev.tpcomm.MessageInfo
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.engine.CommunicatorFront
import dev.tpcomm.engine.OperationCall
import dev.tpcomm.spi.DeviceStaging
import dev.tpcomm.spi.DeviceStagingRegistry
import java.lang.foreign.Arena

/**
 * Runs an MPI communicator's operations on device tensors that MPI cannot take directly (MPI is not CUDA-aware,
 * `mpi.cudaAware=Disabled`, or a ROCm tensor) through host memory, with the [DeviceStaging] that
 * [DeviceStagingRegistry] finds for the tensor's device: copy the inputs to host temporaries, run
 * the host operation on them, copy the outputs back. Each operation copies only what it reads
 * (inputs; the root's buffer of a broadcast) and writes (outputs; only the root's of a reduce).
 *
 * Temporaries are freed when the operation ends, also when it fails, unless the failure broke the
 * communicator (MPI may then still touch them: they are kept for the life of the process). A failed
 * copy to the host breaks the communicator (this rank can no longer join the operation its peers
 * are in); a failed copy back does not (every rank finished the operation).
 *
 * Arguments were checked by the front's validator before any of these functions is called (dims
 * come normalised); they run the [collectives]' and [messages]' `run*` bodies on the host
 * temporaries, which check nothing again.
 */
internal class MpiDeviceStaging(
    private val front: CommunicatorFront,
    private val collectives: MpiCollectives,
    private val messages: MpiPointToPoint,
    private val failures: MpiFailures,
    private val hostWork: MpiHostWork,
    private val runtime: MpiRuntime,
    /** How the CUDA-awareness was decided, for messages. */
    private val cudaAwareness: String,
) {
    /** True when [t] is a device tensor MPI is not given directly ([MpiHostWork.direct]). */
    fun needed(t: Tensor?): Boolean = t != null && t.device.isGpu && !hostWork.direct(t)

    suspend fun allReduce(call: OperationCall, tensor: Tensor, op: ReduceOp): Tensor = staged("allReduce") {
        val h = copyIn(tensor)
        collectives.runAllReduce(call, h, op)
        copyOut(h, tensor)
        tensor
    }

    suspend fun broadcast(call: OperationCall, tensor: Tensor, root: Int): Tensor = staged("broadcast") {
        val isRoot = front.rank == root
        val h = if (isRoot) copyIn(tensor) else blank(tensor)
        collectives.runBroadcast(call, h, root)
        if (!isRoot) copyOut(h, tensor)
        tensor
    }

    suspend fun reduce(call: OperationCall, tensor: Tensor, root: Int, op: ReduceOp): Tensor = staged("reduce") {
        val h = copyIn(tensor)
        collectives.runReduce(call, h, root, op)
        if (front.rank == root) copyOut(h, tensor)
        tensor
    }

    suspend fun allGatherInto(call: OperationCall, output: Tensor, input: Tensor, d: Int): Tensor = staged("allGather") {
        val i = copyIn(input)
        val o = blank(output)
        collectives.runAllGather(call, o, i, d)
        copyOut(o, output)
        output
    }

    suspend fun reduceScatterInto(call: OperationCall, output: Tensor, input: Tensor, op: ReduceOp, d: Int): Tensor = staged("reduceScatter") {
        val i = copyIn(input)
        val o = blank(output)
        collectives.runReduceScatter(call, o, i, op, d)
        copyOut(o, output)
        output
    }

    /** The root's result is a new host tensor, as for host inputs. */
    suspend fun gather(call: OperationCall, input: Tensor, root: Int, d: Int, output: Tensor?): Tensor? = staged("gather") {
        collectives.runGather(call, copyIn(input), root, d, output)
    }

    /** [input] is the root's (null on the other ranks, which read none). */
    suspend fun scatter(call: OperationCall, output: Tensor, input: Tensor?, root: Int, d: Int): Unit = staged("scatter") {
        val i = input?.let { copyIn(it) }
        val o = blank(output)
        collectives.runScatter(call, o, i, root, d)
        copyOut(o, output)
    }

    /** The result is a new host tensor, as for host inputs. */
    suspend fun allToAll(call: OperationCall, input: Tensor, d: Int, output: Tensor): Tensor = staged("allToAll") {
        collectives.runAllToAll(call, copyIn(input), d, output)
    }

    suspend fun send(entry: FlightRecorder.Entry, tensor: Tensor, dst: Int, tag: Int, handOff: MpiHandOff): Unit = staged("send") {
        messages.runSend(entry, copyIn(tensor), dst, tag, handOff)
    }

    suspend fun recv(entry: FlightRecorder.Entry, tensor: Tensor, src: Int, tag: Int, handOff: MpiHandOff): MessageInfo = staged("recv") {
        val h = blank(tensor)
        val info = messages.runRecv(entry, h, src, tag, handOff)
        copyOut(h, tensor)
        info
    }

    private inline fun <T> staged(operation: String, body: Session.() -> T): T {
        val session = Session(operation)
        var failure: Throwable? = null
        try {
            return session.body()
        } catch (e: Throwable) {
            failure = e
            throw e
        } finally {
            session.end(failure)
        }
    }

    /** The host temporaries of one staged operation. */
    private inner class Session(val operation: String) {
        private var arena: Arena? = null

        /** The copy failure this session threw, if any: MPI never held the temporaries then. */
        private var ownFailure: Throwable? = null

        private fun temporary(like: Tensor): Tensor {
            val a = arena ?: Arena.ofShared().also { arena = it }
            return Tensor.zeros(like.dtype, like.shape, a)
        }

        /** A host copy of [t] (or [t] itself when MPI takes it as it is). */
        fun copyIn(t: Tensor): Tensor {
            if (!needed(t)) return t
            val staging = stagingFor(t)
            val h = temporary(t)
            if (t.byteSize > 0) {
                guarded({ e ->
                    "copying the ${t.dtype}${t.shape} input from ${t.device} to host memory with ${staging.name} failed (${e.message}); " +
                        "this rank cannot join the operation, so the communicator is aborted"
                }, breaks = true) { staging.copyToHost(t.device, t.address, h.segment, t.byteSize) }
            }
            return h
        }

        /** A host tensor shaped as [t] whose content is not read (or [t] itself when MPI takes it as it is). */
        fun blank(t: Tensor): Tensor {
            if (!needed(t)) return t
            stagingFor(t)
            return temporary(t)
        }

        /** Copies the host result [h] back to device tensor [t] (nothing when [h] is [t]). */
        fun copyOut(h: Tensor, t: Tensor) {
            if (h === t || t.byteSize == 0L) return
            val staging = stagingFor(t)
            guarded({ e ->
                "the operation completed, but copying its ${t.dtype}${t.shape} result back to ${t.device} with ${staging.name} failed " +
                    "(${e.message}); the device tensor holds undefined bytes (the communicator stays usable)"
            }, breaks = false) { staging.copyToDevice(t.device, h.segment, t.address, t.byteSize) }
        }

        /** Runs a copy; its failure becomes the [CommunicationException] that [message] describes. */
        private inline fun guarded(message: (Throwable) -> String, breaks: Boolean, copy: () -> Unit) {
            val failure = try {
                copy()
                return
            } catch (e: Exception) {
                e
            } catch (e: LinkageError) {
                e
            }
            throw failures.stagingFailed(operation, message(failure), failure, breaks).also { ownFailure = it }
        }

        private fun stagingFor(t: Tensor): DeviceStaging {
            return DeviceStagingRegistry.find(t.device) ?: throw IllegalArgumentException(refusal(t.device))
        }

        private fun refusal(device: Device): String {
            val why = if (device is Device.Cuda) {
                "this MPI library is not given device pointers ($cudaAwareness)"
            } else {
                "MPI is only ever given CUDA device pointers"
            }
            val tried = DeviceStagingRegistry.unavailable.takeIf { it.isNotEmpty() }?.joinToString("; ", prefix = " (providers found but unavailable: ", postfix = ")").orEmpty()
            return "$operation: the tensor is on $device, but $why and no device staging for $device is registered$tried. " +
                "Put comm-nccl (CUDA) or comm-rccl (ROCm) with a working GPU runtime on the classpath, whose staging is found " +
                "through ServiceLoader, or register one with dev.tpcomm.spi.DeviceStagingRegistry.register(staging); or copy the tensor " +
                "to the host, use the NCCL/RCCL backend" + if (device is Device.Cuda) ", or set mpi.cudaAware=Enabled if your MPI is CUDA-aware" else ""
        }

        fun end(failure: Throwable?) {
            val a = arena ?: return
            // After an operation failure that broke the communicator MPI may still use the temporaries: keep them.
            if (failure != null && failure !== ownFailure && front.isAborted) runtime.pin(a) else a.close()
        }
    }
}
