package dev.tpcomm.mpi.jobs

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.Tensor
import kotlinx.coroutines.runBlocking

/**
 * One rank of the job of [dev.tpcomm.mpi.MpiFailingRankJobsTest] (issue 20 item 3), written as a
 * user's training program would be: `Comm.create("mpi")` with the default timeout (10 minutes),
 * three all-reduces, then rank 1 throws from `main` (printing `FAULT <epochMillis>` first) while
 * the others call a fourth all-reduce (printing `CAUGHT rank <r> <class>: <message>` if it throws).
 */
object MpiThrowingRankMain {
    @JvmStatic
    fun main(args: Array<String>) {
        runBlocking {
            val comm = Comm.create("mpi", CommConfig.fromEnvironment())
            val t = Tensor.of(floatArrayOf(1f, 2f, 3f))
            repeat(3) { comm.allReduce(t) }
            if (comm.rank == 1) {
                println("FAULT ${System.currentTimeMillis()}")
                System.out.flush()
                throw IllegalStateException("rank 1 fails on purpose after three all-reduces")
            }
            try {
                comm.allReduce(t)
            } catch (e: CommunicationException) {
                println("CAUGHT rank ${comm.rank} ${e.javaClass.name}: ${e.message}")
                System.out.flush()
                throw e
            }
            comm.close()
            println("DONE rank ${comm.rank}")
        }
    }
}
