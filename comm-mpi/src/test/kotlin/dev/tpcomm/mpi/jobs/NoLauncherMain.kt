package dev.tpcomm.mpi.jobs

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import kotlinx.coroutines.runBlocking
import kotlin.time.Duration.Companion.seconds

/**
 * `Comm.create("mpi", CommConfig.fromEnvironment())` in a JVM that no MPI launcher started (torchrun's
 * variables only): prints `created ...` or `refused <class>: <message>`. Run by [NoLauncherTest].
 */
object NoLauncherMain {
    @JvmStatic
    fun main(args: Array<String>) = runBlocking {
        try {
            val comm = Comm.create("mpi", CommConfig.fromEnvironment().copy(timeout = 10.seconds))
            println("created mpi rank ${comm.rank} of ${comm.worldSize}")
            comm.close()
        } catch (e: Exception) {
            println("refused ${e::class.simpleName}: ${e.message?.replace('\n', ' ')}")
        }
    }
}
