package dev.tpcomm.mpi

import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

/**
 * The consistency-check signature of one [MpiCommunicator] (`CommConfig.checkConsistency`): before
 * each collective every rank encodes what it is about to call ([encode]: protocol magic,
 * operation, dtype, element count, shape hash, root, dim, reduce op; [SIG_LEN] longs), the
 * communicator all-gathers [send] into [received], and [compare] names the ranks and fields that
 * differ from rank 0's. The buffers live in [arena] (native, allocated once).
 */
internal class MpiSignatureProtocol(private val worldSize: Int, arena: Arena) {
    /** This rank's signature, as sent. */
    val send: MemorySegment = arena.allocate(8L * SIG_LEN, 64)

    /** Every rank's signature after the all-gather, rank order. */
    val received: MemorySegment = arena.allocate(8L * SIG_LEN * worldSize, 64)

    /** A disagreement found by [compare]. */
    class Mismatch(val message: String, val ranks: List<Int>, val fields: List<String>)

    /** Encodes a call of [op] (one of the `OP_` codes). */
    fun encode(op: Int, t: Tensor?, root: Int, dim: Int, reduceOp: ReduceOp?): LongArray = longArrayOf(
        SIG_MAGIC, op.toLong(), (t?.dtype?.ordinal ?: -1).toLong(), t?.numel ?: -1L, (t?.shape?.hashCode() ?: 0).toLong(),
        root.toLong(), dim.toLong(), (reduceOp?.ordinal ?: -1).toLong(),
    )

    /** Copies [sig] into [send]. */
    fun load(sig: LongArray) {
        MemorySegment.copy(sig, 0, send, ValueLayout.JAVA_LONG, 0, SIG_LEN)
    }

    /** Compares [received] with rank 0's signature; null when every rank agrees. */
    fun compare(): Mismatch? {
        val all = received
        val first = LongArray(SIG_LEN) { all.getAtIndex(ValueLayout.JAVA_LONG, it.toLong()) }
        val ranks = ArrayList<Int>()
        val fields = LinkedHashSet<String>()
        val descriptions = ArrayList<String>()
        for (r in 1 until worldSize) {
            var differs = false
            for (i in 0 until SIG_LEN) {
                val v = all.getAtIndex(ValueLayout.JAVA_LONG, (r * SIG_LEN + i).toLong())
                if (v != first[i]) {
                    differs = true
                    fields += SIG_FIELDS[i]
                }
            }
            if (differs) {
                ranks += r
                descriptions += "rank $r: ${describe(r)}"
            }
        }
        if (ranks.isEmpty()) return null
        return Mismatch(
            "collective mismatch: rank 0 called ${describe(0)} but ${descriptions.joinToString("; ")} (fields differing: ${fields.joinToString()})",
            ranks, fields.toList(),
        )
    }

    private fun describe(r: Int): String {
        fun f(i: Int) = received.getAtIndex(ValueLayout.JAVA_LONG, (r * SIG_LEN + i).toLong())
        val op = OP_NAMES.getOrElse(f(1).toInt()) { "op#${f(1)}" }
        val dtype = f(2).toInt().let { if (it in DType.entries.indices) DType.entries[it].name else "-" }
        val reduce = f(7).toInt().let { if (it in ReduceOp.entries.indices) " op=${ReduceOp.entries[it]}" else "" }
        val root = if (f(5) >= 0) " root=${f(5)}" else ""
        val dim = if (f(6) >= 0) " dim=${f(6)}" else ""
        return "$op($dtype numel=${f(3)} shapeHash=${f(4)}$root$dim$reduce)"
    }

    companion object {
        const val SIG_LEN: Int = 8
        const val SIG_MAGIC: Long = 0x7470636f6d6dL // "tpcomm"
        val SIG_FIELDS: List<String> = listOf("protocol", "operation", "dtype", "shape", "shape", "root", "dim", "op")
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
        val OP_NAMES: List<String> = listOf(
            "?", "allReduce", "broadcast", "reduce", "allGather", "reduceScatter", "gather", "scatter", "allToAll", "barrier", "split",
        )
    }
}
