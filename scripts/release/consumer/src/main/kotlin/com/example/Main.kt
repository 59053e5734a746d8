package com.example

import dev.tpcomm.Tensor
import dev.tpcomm.allGatherObject
import dev.tpcomm.coroutines.runLocalWorld
import dev.tpcomm.mpi.MpiCommunicator
import kotlinx.coroutines.runBlocking
import kotlinx.serialization.Serializable
import kotlin.system.exitProcess

/** A class of the user's own, sent by an object collective: needs the kotlinx-serialization compiler plugin the README's Maven lines name. */
@Serializable
data class RankInfo(val rank: Int, val host: String)

// A user's program: an all-reduce and an object all-gather of its own @Serializable class on four
// in-process ranks (comm-coroutines), and a reference to the MPI backend's class (comm-mpi) to show
// it is on the classpath the README's lines give.
fun main() {
    val results = runBlocking {
        runLocalWorld(worldSize = 4) { comm ->
            val x = Tensor.of(floatArrayOf(comm.rank.toFloat(), 1f))
            comm.allReduce(x)
            val infos = comm.allGatherObject(RankInfo(comm.rank, "node"))
            (x.getFloat(0) + x.getFloat(1)) to infos.map { it.rank }
        }
    }
    val mpi = MpiCommunicator::class.java.name
    val sums = results.map { it.first }
    if (sums != List(4) { 10f } || results.any { it.second != listOf(0, 1, 2, 3) }) {
        println("consumer: wrong results $results")
        exitProcess(1)
    }
    println("consumer: allReduce over 4 local ranks = $sums, allGatherObject of RankInfo = ${results[0].second}; MPI backend class $mpi on the classpath")
}
