package dev.tpcomm.engine

import dev.tpcomm.MessageInfo
import dev.tpcomm.PointToPoint
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.FlightRecorder

/**
 * The front's path of one point-to-point call: recorded (a step of the composite operation it runs
 * in, if any) and refused when the communicator is unusable, its tensor retained, issued on the
 * backend, completed or failed with the named exception, released (unless the backend took the
 * tensor over, an MPI message that outlives its released caller).
 *
 * One per communicator, owned by its [front]; thread-safe.
 */
internal class PointToPointIssue(private val front: CommunicatorFront) {
    /** [CommunicatorFront.send] of arguments the validator already accepted: record, retain, [CommunicatorBackend.issueSend], complete or fail, release. */
    suspend fun send(tensor: Tensor, dst: Int, tag: Int) {
        val entry = front.beginPointToPoint("send", tensor, dst, tag)
        tensor.retain("send")
        try {
            front.recorded(entry) { front.backend.issueSend(entry, tensor, dst, tag) }
        } finally {
            if (!entry.tensorsHandedOver) tensor.release()
        }
    }

    /** [CommunicatorFront.recv] of arguments the validator already accepted: record, retain, [CommunicatorBackend.issueRecv], complete or fail, release. */
    suspend fun recv(tensor: Tensor, src: Int, tag: Int): MessageInfo {
        val entry = front.beginPointToPoint("recv", tensor, src, tag)
        // A receive buffer closed while the receive is posted stays allocated until it completes or is withdrawn.
        tensor.retain("recv")
        try {
            return front.recorded(entry) { front.backend.issueRecv(entry, tensor, src, tag) }
        } finally {
            if (!entry.tensorsHandedOver) tensor.release()
        }
    }

    /**
     * A batch the backend issues as one operation ([CommunicatorBackend.groupsBatches], NCCL's group): recorded
     * once, every tensor retained until it ends, the numbered-but-never-issued rule if a tensor was
     * closed before it was issued.
     */
    suspend fun groupedBatch(ops: List<PointToPoint>): List<MessageInfo> {
        val first = ops.first()
        val entry = front.beginPointToPoint("sendRecv", first.tensor, first.peer, FlightRecorder.NONE)
        var held = 0
        try {
            for (o in ops) { o.tensor.retain("sendRecv"); held++ }
        } catch (t: Throwable) {
            // A tensor closed before the batch was issued: its peers' counterparts have no partner.
            for (i in 0 until held) ops[i].tensor.release()
            entry.fail(t)
            front.abortNotIssued(entry.operation, entry.sequence, t)
            throw t
        }
        try {
            return front.recorded(entry) { front.backend.issueGroupedBatch(entry, ops) }
        } finally {
            if (!entry.tensorsHandedOver) for (o in ops) o.tensor.release()
        }
    }
}
