package dev.tpcomm.mpi.jobs

import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.mpi.MpiBackendFactory
import dev.tpcomm.mpi.MpiCommunicator
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext

/** Diagnostic: per-call cost of allReduce on the communicator's thread (singleton world). */
object OverheadProbe {
    @JvmStatic
    fun main(args: Array<String>) {
        runBlocking {
            val comm = MpiBackendFactory().create(CommConfig()) as MpiCommunicator
            val t = Tensor.zeros(DType.Float32, 2)
            withContext(comm.nativeDispatcher) {
                repeat(5) { round ->
                    val n = 1_000_000
                    val t0 = System.nanoTime()
                    for (i in 0 until n) comm.allReduce(t)
                    val dt = (System.nanoTime() - t0).toDouble() / n
                    println("round $round: allReduce ${"%.1f".format(dt)} ns/call")
                }
            }
            comm.close()
        }
    }
}
