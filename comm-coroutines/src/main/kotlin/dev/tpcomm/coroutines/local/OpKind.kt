package dev.tpcomm.coroutines.local

import dev.tpcomm.spi.CollectiveOp

/** Codes of the operations that meet in an [OpSlot], with their names as users and the flight recorder see them. */
internal object OpKind {
    const val ALL_REDUCE = 0
    const val BROADCAST = 1
    const val REDUCE = 2
    const val ALL_GATHER = 3
    const val REDUCE_SCATTER = 4
    const val GATHER = 5
    const val SCATTER = 6
    const val ALL_TO_ALL = 7
    const val BARRIER = 8
    const val SPLIT = 9
    const val GROUP = 10
    const val ALL_GATHER_V = 14
    const val REDUCE_SCATTER_V = 15
    const val ALL_TO_ALL_V = 16

    init {
        // The codes index CollectiveOp.entries: keep both lists in one order.
        require(CollectiveOp.entries[ALL_TO_ALL] == CollectiveOp.AllToAll && CollectiveOp.entries[GROUP] == CollectiveOp.Group &&
            CollectiveOp.entries[ALL_GATHER_V] == CollectiveOp.AllGatherV && CollectiveOp.entries[ALL_TO_ALL_V] == CollectiveOp.AllToAllV)
    }

    /** The core's name of [kind]: the codes are [CollectiveOp]'s ordinals, in the same order. */
    fun name(kind: Int): String = CollectiveOp.entries[kind].apiName
}

/**
 * The per-rank sizes of an uneven collective, kept in [OpSlot.extras]: [sizes] (allGatherV and
 * reduceScatterV: rows per rank; allToAllV: the input splits) with their prefix sums, and for
 * allToAllV the output splits. [rowBytes] is the byte size of one row (slice along dim 0).
 */
internal class UnevenSizes(sizes: List<Int>, outSizes: List<Int>?, @JvmField val rowBytes: Long) {
    @JvmField val sizes: IntArray = sizes.toIntArray()
    @JvmField val prefix: LongArray = prefixOf(this.sizes)
    @JvmField val outSizes: IntArray? = outSizes?.toIntArray()
    @JvmField val outPrefix: LongArray? = this.outSizes?.let { prefixOf(it) }

    private companion object {
        fun prefixOf(a: IntArray): LongArray {
            val p = LongArray(a.size + 1)
            for (i in a.indices) p[i + 1] = p[i] + a[i]
            return p
        }
    }
}
