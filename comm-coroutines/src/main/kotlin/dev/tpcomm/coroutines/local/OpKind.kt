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

    init {
        // The codes index CollectiveOp.entries: keep both lists in one order.
        require(CollectiveOp.entries[ALL_TO_ALL] == CollectiveOp.AllToAll && CollectiveOp.entries[GROUP] == CollectiveOp.Group)
    }

    /** The core's name of [kind]: the codes are [CollectiveOp]'s ordinals, in the same order. */
    fun name(kind: Int): String = CollectiveOp.entries[kind].apiName

    fun hasDim(kind: Int): Boolean = CollectiveOp.entries[kind].hasDim
}
