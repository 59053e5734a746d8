package dev.tpcomm.mpi.jobs

import dev.tpcomm.BackendUnavailableException
import dev.tpcomm.CommConfig
import dev.tpcomm.Tensor
import dev.tpcomm.mpi.MpiBackendFactory
import kotlinx.coroutines.runBlocking
import kotlin.system.exitProcess
import kotlin.time.Duration.Companion.seconds

/**
 * Failure jobs for [MpiJobsTest]: `stall` (the last rank never calls; the others must time out,
 * print the diagnostic and MPI_Abort the job), `kill` (the last rank dies mid-run; the job must
 * end non-zero), `missing` (no library: print the BackendUnavailableException and exit 3).
 */
object MpiFailureMain {
    @JvmStatic
    fun main(args: Array<String>) {
        val mode = args[0]
        val timeoutSeconds = args.getOrElse(1) { "3" }.toInt()
        runBlocking {
            val comm = try {
                MpiBackendFactory().create(CommConfig.fromEnvironment().copy(timeout = timeoutSeconds.seconds))
            } catch (e: BackendUnavailableException) {
                System.err.println("UNAVAILABLE: ${e.message}")
                exitProcess(3)
            }
            val last = comm.worldSize - 1
            val t = Tensor.of(floatArrayOf(1f, 2f, 3f))
            comm.allReduce(t)
            when (mode) {
                "stall" -> if (comm.rank == last) {
                    System.err.println("rank ${comm.rank}: stalling")
                    Thread.sleep(600_000)
                } else {
                    comm.allReduce(t)
                }
                "kill" -> if (comm.rank == last) {
                    System.err.println("rank ${comm.rank}: dying")
                    Runtime.getRuntime().halt(9)
                } else {
                    repeat(1000) { comm.allReduce(t); Thread.sleep(5) }
                }
                else -> error("unknown mode $mode")
            }
            comm.close()
        }
        exitProcess(0)
    }
}
