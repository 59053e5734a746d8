package com.example

import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import dev.tpcomm.mpi.MpiCommunicator
import kotlinx.coroutines.runBlocking
import kotlin.system.exitProcess

// A user's program: an all-reduce on four in-process ranks (comm-coroutines), and a reference to
// the MPI backend's class (comm-mpi) to show it is on the classpath the README's lines give.
fun main() {
    val sums = runBlocking {
        runLocalWorld(worldSize = 4) { comm ->
            val x = Tensor.of(floatArrayOf(comm.rank.toFloat(), 1f))
            comm.allReduce(x)
            x.getFloat(0) + x.getFloat(1)
        }
    }
    val mpi = MpiCommunicator::class.java.name
    if (sums != List(4) { 10f }) {
        println("consumer: wrong all-reduce result $sums")
        exitProcess(1)
    }
    println("consumer: allReduce over 4 local ranks = $sums; MPI backend class $mpi on the classpath")
}
