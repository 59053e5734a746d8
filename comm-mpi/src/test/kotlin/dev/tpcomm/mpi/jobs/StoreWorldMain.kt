package dev.tpcomm.mpi.jobs

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import kotlinx.coroutines.runBlocking
import kotlin.system.exitProcess
import kotlin.time.Duration.Companion.seconds

/**
 * One rank of a job that no MPI launcher started, with only torchrun's variables (`RANK`,
 * `WORLD_SIZE`, `MASTER_ADDR`, ...): `Comm.create(args[0], CommConfig.fromEnvironment())` with a
 * timeout and creation timeout of `args[1]` seconds, one `allReduce` of `rank + 1`, and one line for [StoreWorldJobsTest]:
 * `rank R of N backend B sum S create-ms T steps <step>=<ms since create>,...` or `failed <exception class>: <message>`.
 * `TPCOMM_TEST_HALT_AFTER_MS`: the process ends itself (`Runtime.halt(9)`) that long after it started,
 * as a rank that dies would.
 */
object StoreWorldMain {
    @JvmStatic
    fun main(args: Array<String>) {
        val backend = args.getOrElse(0) { "mpi" }
        val timeout = args.getOrElse(1) { "60" }.toInt().seconds
        System.getenv("TPCOMM_TEST_HALT_AFTER_MS")?.toLongOrNull()?.let { ms ->
            Thread.ofPlatform().daemon(true).start {
                Thread.sleep(ms)
                say("halting")
                Runtime.getRuntime().halt(9)
            }
        }
        val status = runBlocking {
            val started = System.nanoTime()
            val comm = try {
                Comm.create(backend, CommConfig.fromEnvironment().copy(timeout = timeout, creationTimeout = timeout))
            } catch (e: Exception) {
                say("failed ${e::class.simpleName}: ${e.message?.lineSequence()?.first()} after ${(System.nanoTime() - started) / 1_000_000} ms")
                return@runBlocking 3
            }
            val createMs = (System.nanoTime() - started) / 1_000_000
            Tensor.of(longArrayOf(comm.rank + 1L)).use { t ->
                comm.allReduce(t, ReduceOp.Sum)
                val steps = dev.tpcomm.mpi.MpiStoreWorld.timing?.stepsMillis?.entries?.joinToString(",") { "${it.key}=${it.value}" }
                say("rank ${comm.rank} of ${comm.worldSize} backend ${comm.backendName} sum ${t.getLong(0)} create-ms $createMs steps $steps")
            }
            comm.close()
            0
        }
        System.out.flush()
        exitProcess(status)
    }
}
