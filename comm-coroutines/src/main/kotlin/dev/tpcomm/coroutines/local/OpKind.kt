package dev.tpcomm.coroutines.local

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

    private val NAMES = arrayOf(
        "allReduce", "broadcast", "reduce", "allGather", "reduceScatter", "gather", "scatter", "allToAll",
        "barrier", "split", "group",
    )

    fun name(kind: Int): String = NAMES[kind]

    fun hasOp(kind: Int): Boolean = kind == ALL_REDUCE || kind == REDUCE || kind == REDUCE_SCATTER
    fun hasRoot(kind: Int): Boolean = kind == BROADCAST || kind == REDUCE || kind == GATHER || kind == SCATTER
    fun hasDim(kind: Int): Boolean =
        kind == ALL_GATHER || kind == REDUCE_SCATTER || kind == GATHER || kind == SCATTER || kind == ALL_TO_ALL
    fun hasTensor(kind: Int): Boolean = kind <= ALL_TO_ALL
}
