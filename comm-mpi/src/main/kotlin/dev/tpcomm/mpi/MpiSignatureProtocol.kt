package dev.tpcomm.mpi

import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.spi.CollectiveOp
import dev.tpcomm.spi.CollectiveSignature
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

/**
 * The consistency check of one [MpiCommunicator] (`CommConfig.checkConsistency`) over the core's
 * one signature encoding ([CollectiveSignature]): before each collective every rank encodes what
 * it is about to call ([encode]), the communicator all-gathers [send] into [received] (MPI moves
 * the [SIG_LEN] longs), and [compare] names the ranks and fields that differ from rank 0's. The
 * buffers live in [arena] (native, allocated once).
 */
internal class MpiSignatureProtocol(private val worldSize: Int, arena: Arena, private val description: String) {
    /** This rank's signature, as sent. */
    val send: MemorySegment = arena.allocate(8L * SIG_LEN, 64)

    /** Every rank's signature after the all-gather, rank order. */
    val received: MemorySegment = arena.allocate(8L * SIG_LEN * worldSize, 64)

    /** Encodes a call of [op] (one of the `OP_` codes); [dim] is normalised or -1, [root] -1 when none. */
    fun encode(op: Int, t: Tensor?, root: Int, dim: Int, reduceOp: ReduceOp?): LongArray =
        CollectiveSignature.of(OPS[op], t, reduceOp, root, dim)

    /** Copies [sig] into [send]. */
    fun load(sig: LongArray) {
        MemorySegment.copy(sig, 0, send, ValueLayout.JAVA_LONG, 0, SIG_LEN)
    }

    /** Compares [received] with rank 0's signature for call [sequence]; null when every rank agrees. */
    fun compare(sequence: Long): CollectiveSignature.Mismatch? {
        val all = LongArray(SIG_LEN * worldSize) { received.getAtIndex(ValueLayout.JAVA_LONG, it.toLong()) }
        return CollectiveSignature.compare(all, worldSize, sequence, description)
    }

    companion object {
        const val SIG_LEN: Int = CollectiveSignature.SIZE
        const val OP_ALLREDUCE = 1
        const val OP_BROADCAST = 2
        const val OP_REDUCE = 3
        const val OP_ALLGATHER = 4
        const val OP_REDUCE_SCATTER = 5
        const val OP_GATHER = 6
        const val OP_SCATTER = 7
        const val OP_ALLTOALL = 8
        const val OP_BARRIER = 9
        const val OP_SPLIT = 10

        /** The core's operation of each `OP_` code (index 0 unused). */
        private val OPS: Array<CollectiveOp> = arrayOf(
            CollectiveOp.Barrier, CollectiveOp.AllReduce, CollectiveOp.Broadcast, CollectiveOp.Reduce, CollectiveOp.AllGather,
            CollectiveOp.ReduceScatter, CollectiveOp.Gather, CollectiveOp.Scatter, CollectiveOp.AllToAll, CollectiveOp.Barrier,
            CollectiveOp.Split,
        )
    }
}
