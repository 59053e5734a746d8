package dev.tpcomm.coroutines

import dev.tpcomm.DType
import dev.tpcomm.Tensor
import kotlinx.coroutines.runBlocking
import java.lang.management.ManagementFactory
import javax.management.ObjectName
import kotlin.system.exitProcess

/**
 * Test aid, run in a child JVM by [FirstCallCostTest]: what a user's program does first (a local
 * world, one 8-byte all-reduce), timed from before the world to after the call; prints
 * `first_call_ms=<ms>`. With the argument `mbeans`, then waits up to 30 s for the ranks' MBeans and
 * prints `mbeans=<count>`. With `jfr-later`, then records the next all-reduce with a JFR recording
 * started only now and prints `jfr_events=<allReduce events of rank 0 and 1>`.
 */
internal object FirstCallProgram {
    @JvmStatic
    fun main(args: Array<String>) {
        val t0 = System.nanoTime()
        runBlocking {
            runLocalWorld(2) { comm ->
                Tensor.zeros(DType.Float32, 2).use { comm.allReduce(it) }
                if (comm.rank == 0) println("first_call_ms=${(System.nanoTime() - t0) / 1_000_000}")
                if (args.contains("mbeans") && comm.rank == 0) {
                    val end = System.nanoTime() + 30_000_000_000L
                    var n = 0
                    while (System.nanoTime() < end) {
                        n = ManagementFactory.getPlatformMBeanServer().queryNames(ObjectName("dev.tpcomm:type=Communicator,*"), null).size
                        if (n >= 2) break
                        Thread.sleep(20)
                    }
                    println("mbeans=$n")
                }
                if (args.contains("jfr-later")) {
                    // A recording started after the communicator's first calls, as `jcmd JFR.start` would.
                    comm.barrier()
                    val file = java.nio.file.Files.createTempFile("tpcomm-first-call-", ".jfr")
                    if (comm.rank == 0) {
                        jdk.jfr.Recording().use { rec ->
                            rec.enable("dev.tpcomm.Collective").withoutThreshold()
                            rec.start()
                            comm.barrier()
                            Tensor.zeros(DType.Float32, 2).use { comm.allReduce(it) }
                            comm.barrier() // rank 1's event is committed too
                            rec.stop()
                            rec.dump(file)
                        }
                        val events = jdk.jfr.consumer.RecordingFile.readAllEvents(file)
                            .count { it.eventType.name == "dev.tpcomm.Collective" && it.getString("operation") == "allReduce" }
                        println("jfr_events=$events")
                        java.nio.file.Files.deleteIfExists(file)
                    } else {
                        comm.barrier()
                        Tensor.zeros(DType.Float32, 2).use { comm.allReduce(it) }
                        comm.barrier()
                    }
                }
                comm.barrier()
            }
        }
        exitProcess(0)
    }
}
