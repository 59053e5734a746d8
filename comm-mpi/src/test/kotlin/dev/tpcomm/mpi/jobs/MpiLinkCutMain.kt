package dev.tpcomm.mpi.jobs

import dev.tpcomm.CommConfig
import dev.tpcomm.Comm
import dev.tpcomm.Tensor
import kotlinx.coroutines.runBlocking
import java.nio.file.Files
import java.nio.file.Path
import kotlin.system.exitProcess
import kotlin.time.Duration.Companion.seconds

/**
 * One rank of the link-cut job of `scripts/multihost.sh --scenario linkcut`, written as a user's
 * training loop would be: `Comm.create("mpi")` with the configuration from the environment
 * (`TPCOMM_TIMEOUT_SECONDS`), then all-reduces of 64 KiB with a short pause between them. After
 * 20 rounds each rank prints `LINKCUT-READY rank R host H`; the script then cuts one host's link.
 * Nothing is caught: the exception a collective throws ends `main` (the JVM prints it), and the
 * MPI backend's deadline handling (`MPI_Abort` by default) ends the job.
 *
 * Without a cut the loop stops after `args[0]` seconds (default 120) and the rank exits 0, so a
 * job whose link was never cut, or that survived the cut, ends 0 and fails the scenario's check
 * instead of hanging.
 */
object MpiLinkCutMain {
    @JvmStatic
    fun main(args: Array<String>) {
        val limitSeconds = args.getOrElse(0) { "120" }.toLong()
        val host = runCatching { Files.readString(Path.of("/proc/sys/kernel/hostname")).trim() }.getOrDefault("?")
        runBlocking {
            val config = CommConfig.fromEnvironment()
            Comm.create("mpi", config).use { comm ->
                val t = Tensor.of(FloatArray(16 * 1024) { 1f })
                val end = System.nanoTime() + limitSeconds.seconds.inWholeNanoseconds
                var round = 0
                while (System.nanoTime() < end) {
                    comm.allReduce(t)
                    round++
                    if (round == 20) {
                        println("LINKCUT-READY rank ${comm.rank} of ${comm.worldSize} host $host timeout ${config.timeout}")
                        System.out.flush()
                    }
                    Thread.sleep(10)
                }
                println("LINKCUT-SURVIVED rank ${comm.rank}: $round rounds, no failure within ${limitSeconds}s")
            }
        }
        exitProcess(0)
    }
}
