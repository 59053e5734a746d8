package dev.tpcomm.store

import dev.tpcomm.CommConfig
import kotlinx.coroutines.runBlocking
import kotlin.time.Duration.Companion.seconds

/**
 * One process of a job launched with only torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT): joins the `env://` store (rank 0 hosts it), publishes its rank, waits for every
 * rank's, and prints `rank R of N saw <sum of ranks>`. Run by
 * [EnvRendezvousJobTest], one JVM per rank.
 */
object EnvRendezvousProgram {
    @JvmStatic
    fun main(args: Array<String>) = runBlocking {
        val config = CommConfig.fromEnvironment()
        val store = StoreRendezvous.connect(StoreRendezvous.address("env://"), config.rank, 20.seconds)
        store.set("rank/${config.rank}", "${config.rank}".toByteArray())
        val all = store.multiGet((0 until config.worldSize).map { "rank/$it" }, 20.seconds)
        val sum = all.sumOf { it.decodeToString().toInt() }
        if (config.rank == 0) {
            // Rank 0 hosts the store: it stays until every other rank has read what it needs.
            store.wait((1 until config.worldSize).map { "bye/$it" }, 20.seconds)
        } else {
            store.set("bye/${config.rank}", byteArrayOf(1))
        }
        println("rank ${config.rank} of ${config.worldSize} saw $sum")
        store.close()
    }
}
