package dev.tpcomm

/**
 * One send or receive of a batch given to [Communicator.sendRecv] (PyTorch's `P2POp` for
 * `batch_isend_irecv`). Immutable and thread-safe; make one with [send] or [recv].
 *
 * The tensor must stay valid until the batch returns; do not read a receive's tensor or write a
 * send's tensor before then.
 */
public class PointToPoint private constructor(
    /** The tensor sent, or received into. */
    public val tensor: Tensor,
    /** The destination rank of a send; the source rank of a receive (or [Communicator.ANY_SOURCE] where the backend matches by tag). */
    public val peer: Int,
    /** The tag: >= 0, or [Communicator.ANY_TAG] for a receive where the backend matches by tag. Backends that match by order only (NCCL, RCCL) accept 0 only. */
    public val tag: Int,
    /** True for a send, false for a receive. */
    public val isSend: Boolean,
) {
    override fun toString(): String =
        if (isSend) "send(${tensor.dtype}${tensor.shape} to $peer, tag $tag)" else "recv(${tensor.dtype}${tensor.shape} from $peer, tag $tag)"

    public companion object {
        /** Sends all of [tensor] to rank [dst] with [tag], as [Communicator.send] does. */
        @JvmStatic
        @JvmOverloads
        public fun send(tensor: Tensor, dst: Int, tag: Int = 0): PointToPoint = PointToPoint(tensor, dst, tag, isSend = true)

        /** Receives into all of [tensor] from rank [src] with [tag], as [Communicator.recv] does (the message's byte count must match). */
        @JvmStatic
        @JvmOverloads
        public fun recv(tensor: Tensor, src: Int, tag: Int = 0): PointToPoint = PointToPoint(tensor, src, tag, isSend = false)
    }
}
