package dev.tpcomm.gpu

import dev.tpcomm.Tensor

/**
 * One send or receive of a batch given to [NcclCommunicator.sendRecv]: the batch is issued as one
 * NCCL group, so its transfers progress together, as PyTorch's `batch_isend_irecv` does. Immutable;
 * the tensor must stay valid (and, for a receive, unread) until `sendRecv` returns.
 */
public class PointToPoint private constructor(
    /** The device tensor sent, or received into. */
    public val tensor: Tensor,
    /** The destination rank of a send, the source rank of a receive. */
    public val peer: Int,
    /** True for a send, false for a receive. */
    public val isSend: Boolean,
) {
    override fun toString(): String = if (isSend) "send(${tensor.dtype}${tensor.shape} to $peer)" else "recv(${tensor.dtype}${tensor.shape} from $peer)"

    public companion object {
        /** Sends all of [tensor] to rank [dst] (tag 0: messages between two ranks match in order). */
        @JvmStatic
        public fun send(tensor: Tensor, dst: Int): PointToPoint = PointToPoint(tensor, dst, isSend = true)

        /** Receives into all of [tensor] from rank [src] (the sender's byte count must match). */
        @JvmStatic
        public fun recv(tensor: Tensor, src: Int): PointToPoint = PointToPoint(tensor, src, isSend = false)
    }
}
