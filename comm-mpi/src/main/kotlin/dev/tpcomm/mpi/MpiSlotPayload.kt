package dev.tpcomm.mpi

import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.engine.ExactSum
import dev.tpcomm.engine.RankOrderReduction
import java.lang.foreign.MemorySegment

/**
 * A collective small enough to ride in the consistency check's all-gather ([MpiSignatureProtocol]):
 * each rank writes its part into its slot, and once every rank's digest agreed and every rank
 * carried its part, each rank finishes the operation from the gathered slots, so the check and the
 * collective are one MPI call instead of two. Built only for a call whose signature fixes it on
 * every rank (the operation, dtype, size and op kind), so every rank of an agreeing call builds the
 * same kind; [canCarry] is what only the rank knows.
 */
internal sealed interface MpiSlotPayload {
    /** Whether this rank's part can be copied into its slot here: host memory (not a CUDA-aware device pointer). */
    fun canCarry(): Boolean

    /** Writes this rank's part into [payload] ([MpiSignatureProtocol.PAYLOAD_BYTES] bytes). */
    fun write(payload: MemorySegment)

    /** Finishes the operation from every rank's part ([MpiSignatureProtocol.payloads], rank order). */
    fun finish(payloads: Array<MemorySegment?>)

    /**
     * An in-place all-reduce with [op], the reduction MPI would be given (Avg as Sum: the caller
     * divides afterwards, as after `MPI_Allreduce`), folded in rank order with the in-process
     * backend's kernels ([RankOrderReduction]): every rank reduces the same bytes the same way, so
     * every rank gets the same bits.
     */
    class AllReduce(private val tensor: Tensor, private val op: ReduceOp) : MpiSlotPayload {
        override fun canCarry(): Boolean = !tensor.device.isGpu

        override fun write(payload: MemorySegment) {
            MemorySegment.copy(tensor.segment, 0, payload, 0, tensor.byteSize)
        }

        override fun finish(payloads: Array<MemorySegment?>) {
            RankOrderReduction.reduce(tensor.dtype, op, payloads, tensor.segment, tensor.numel)
        }
    }

    /**
     * A reproducible all-reduce ([root] -1) or reduce to [root] of a small host tensor
     * ([MpiCollectives.runExactReduction]): every rank's slot carries its input, and every rank
     * that receives the result (all of them, or the root) sums the slots exactly ([ExactSum], the
     * average when [average]): the bits of the gather-then-sum path. [finished] tells the caller
     * the slots did it (the gather did not run).
     */
    class Exact(private val tensor: Tensor, private val average: Boolean, private val root: Int, private val rank: Int) : MpiSlotPayload {
        /** Whether [finish] ran: the operation's result is in the tensor. */
        var finished: Boolean = false
            private set

        override fun canCarry(): Boolean = !tensor.device.isGpu

        override fun write(payload: MemorySegment) {
            MemorySegment.copy(tensor.segment, 0, payload, 0, tensor.byteSize)
        }

        override fun finish(payloads: Array<MemorySegment?>) {
            if (root < 0 || rank == root) ExactSum.reduceSegments(tensor.dtype, average, payloads, tensor.segment, tensor.numel)
            finished = true
        }
    }

    /** A broadcast from [root]: the root's slot carries its elements, the others copy them out. */
    class Broadcast(private val tensor: Tensor, private val root: Int, private val rank: Int) : MpiSlotPayload {
        override fun canCarry(): Boolean = !tensor.device.isGpu

        override fun write(payload: MemorySegment) {
            if (rank == root) MemorySegment.copy(tensor.segment, 0, payload, 0, tensor.byteSize)
        }

        override fun finish(payloads: Array<MemorySegment?>) {
            if (rank != root) MemorySegment.copy(payloads[root]!!, 0, tensor.segment, 0, tensor.byteSize)
        }
    }

    /** A barrier: an all-gather completes on a rank only once every rank has entered it, so the exchange is the barrier. */
    data object Barrier : MpiSlotPayload {
        override fun canCarry(): Boolean = true

        override fun write(payload: MemorySegment) {}

        override fun finish(payloads: Array<MemorySegment?>) {}
    }

    companion object {
        /** Whether a tensor of [bytes] fits in a slot. */
        fun fits(bytes: Long): Boolean = bytes <= MpiSignatureProtocol.PAYLOAD_BYTES
    }
}
