package dev.tpcomm.bench

/**
 * A collective the benchmark measures, with nccl-tests' bandwidth conventions.
 *
 * `bytes` is always the size per rank: the tensor each rank passes to all-reduce, broadcast and
 * reduce; each rank's input to all-gather; each rank's output chunk of reduce-scatter; the chunk
 * each rank exchanges with every peer in all-to-all. The latter three move `world x bytes` per rank
 * in total, which is what their algbw counts.
 *
 * @property cliName the name `--op` accepts (nccl-tests' binary names without `_perf`).
 * @property csvName the name in the CSV `collective` column, the same as the peers' programs use.
 */
public enum class BenchOp(public val cliName: String, public val csvName: String) {
    AllReduce("all_reduce", "allreduce"),
    AllGather("all_gather", "allgather"),
    ReduceScatter("reduce_scatter", "reducescatter"),
    Broadcast("broadcast", "broadcast"),
    Reduce("reduce", "reduce"),
    AllToAll("all_to_all", "alltoall");

    /** True for the operations taking a reduction operator. */
    public val reduces: Boolean get() = this == AllReduce || this == ReduceScatter || this == Reduce

    /** True for the operations with a root rank. */
    public val rooted: Boolean get() = this == Broadcast || this == Reduce

    /** Bytes algbw divides by the time: `world x bytes` for all-gather, reduce-scatter and all-to-all, else `bytes`. */
    public fun algBytes(bytesPerRank: Long, world: Int): Double = when (this) {
        AllGather, ReduceScatter, AllToAll -> bytesPerRank.toDouble() * world
        else -> bytesPerRank.toDouble()
    }

    /** nccl-tests' bus-bandwidth factor: all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n; broadcast, reduce 1. */
    public fun busFactor(world: Int): Double = when (this) {
        AllReduce -> 2.0 * (world - 1) / world
        AllGather, ReduceScatter, AllToAll -> (world - 1).toDouble() / world
        Broadcast, Reduce -> 1.0
    }

    /** algbw in GB/s (10^9 bytes per second) for [bytesPerRank] moved in [seconds]. */
    public fun algbw(bytesPerRank: Long, world: Int, seconds: Double): Double = algBytes(bytesPerRank, world) / seconds / 1e9

    /** busbw in GB/s: [algbw] times [busFactor]. */
    public fun busbw(bytesPerRank: Long, world: Int, seconds: Double): Double = algbw(bytesPerRank, world, seconds) * busFactor(world)

    public companion object {
        /**
         * The operation named [name]: its [cliName], its [csvName], or the same without underscores
         * or with dashes (`allreduce`, `all-reduce`), case-insensitively.
         *
         * @throws IllegalArgumentException naming the accepted values.
         */
        public fun parse(name: String): BenchOp {
            val key = name.trim().lowercase().replace("-", "").replace("_", "")
            return entries.firstOrNull { it.csvName == key }
                ?: throw IllegalArgumentException(
                    "unknown --op '$name'; use one of ${entries.joinToString { it.cliName }} or 'all'"
                )
        }
    }
}
