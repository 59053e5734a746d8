package dev.tpcomm.mpi.jobs

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.Tensor
import kotlinx.coroutines.runBlocking
import kotlin.system.exitProcess
import kotlin.time.Duration.Companion.seconds

/**
 * One rank of a job for [dev.tpcomm.mpi.MpiSignalJobsTest] (issue 32, finding 6): one rank is
 * interrupted by a signal while it computes and its peers wait for it in a collective.
 * `mpirun -np 3 java ... MpiSignalMain <INT|TERM> <timeoutSeconds>`.
 *
 * Every rank all-reduces once. Then the last rank (the victim) computes (a busy loop, no MPI
 * call) and, 2 s later, another of its threads sends the signal to its own process with `kill`
 * (what a user's Ctrl-C or a scheduler does to one rank); the other ranks call a second
 * all-reduce, which waits for the victim. Lines printed: `FAULT <epochMillis>` just before the
 * signal, `CAUGHT rank <r> <class>: <message>` when the second all-reduce threw, `DONE rank <r>`
 * when it returned (which must not happen).
 */
object MpiSignalMain {
    @JvmStatic
    fun main(args: Array<String>) {
        val signal = args[0]
        require(signal == "INT" || signal == "TERM") { "signal must be INT or TERM, got $signal" }
        val timeoutSeconds = args.getOrElse(1) { "20" }.toInt()
        val config = CommConfig.fromEnvironment().copy(timeout = timeoutSeconds.seconds)
        runBlocking {
            val comm = Comm.create("mpi", config)
            val t = Tensor.of(floatArrayOf(1f, 2f, 3f))
            comm.allReduce(t)
            if (comm.rank == comm.worldSize - 1) {
                Thread.ofPlatform().daemon(true).start {
                    Thread.sleep(2_000)
                    say("FAULT ${System.currentTimeMillis()}")
                    ProcessBuilder("kill", "-$signal", ProcessHandle.current().pid().toString()).inheritIO().start().waitFor()
                }
                var x = 0L
                while (true) { x = x * 31 + 7; if (x == 42L) break }
                println(x)
            } else {
                try {
                    comm.allReduce(t)
                    say("DONE rank ${comm.rank}")
                } catch (e: CommunicationException) {
                    say("CAUGHT rank ${comm.rank} ${e.javaClass.name}: ${e.message?.lineSequence()?.first()}")
                    throw e
                }
            }
            comm.close()
        }
        exitProcess(0)
    }
}
