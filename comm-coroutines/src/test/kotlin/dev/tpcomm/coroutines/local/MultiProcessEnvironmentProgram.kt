package dev.tpcomm.coroutines.local

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import kotlinx.coroutines.runBlocking
import kotlin.time.Duration.Companion.seconds

/**
 * What a user's program does under a launcher: `Comm.create(<backend>, CommConfig.fromEnvironment())`.
 * Prints `created <backend> rank R of N` or `refused <exception class>: <message>`, one line per backend
 * named in the arguments. Run by [MultiProcessEnvironmentTest] in a JVM of its own, with the
 * launcher's variables in its environment.
 */
object MultiProcessEnvironmentProgram {
    @JvmStatic
    fun main(args: Array<String>) = runBlocking {
        for (backend in args) {
            try {
                val comm = Comm.create(backend, CommConfig.fromEnvironment().copy(timeout = 5.seconds))
                println("created $backend: ${comm.backendName} rank ${comm.rank} of ${comm.worldSize}")
                comm.close()
            } catch (e: Exception) {
                println("refused $backend: ${e::class.simpleName}: ${e.message?.replace('\n', ' ')}")
            }
        }
    }
}
