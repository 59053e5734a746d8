package dev.tpcomm.store

import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainExactlyInAnyOrder
import io.kotest.matchers.shouldBe
import java.io.File
import java.util.concurrent.TimeUnit

/**
 * N JVMs started with only torchrun's variables find each other through `env://`: rank 0 hosts the
 * store on MASTER_PORT, the others connect (retrying until it is up, whichever JVM starts first).
 */
class EnvRendezvousJobTest : FunSpec({
    fun launch(rank: Int, world: Int, port: Int): Process {
        val java = File(System.getProperty("java.home"), "bin/java").path
        val cp = System.getProperty("surefire.test.class.path") ?: System.getProperty("java.class.path")
        val pb = ProcessBuilder(java, "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", cp, EnvRendezvousProgram::class.java.name).redirectErrorStream(true)
        pb.environment().keys.removeIf { it.matches(Regex("^(RANK|WORLD_SIZE|LOCAL_RANK|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_.*|PET_.*|SLURM_.*|OMPI_.*|PMI_.*)$")) }
        pb.environment().putAll(mapOf("RANK" to "$rank", "WORLD_SIZE" to "$world", "LOCAL_RANK" to "$rank", "MASTER_ADDR" to "127.0.0.1", "MASTER_PORT" to "$port"))
        return pb.start()
    }

    test("3 JVMs with torchrun's variables form the store through env://, the last rank starting first") {
        val port = java.net.ServerSocket(0).use { it.localPort }
        val procs = listOf(2, 1, 0).map { r -> r to launch(r, 3, port).also { Thread.sleep(if (r == 2) 300 else 0) } }
        val lines = procs.map { (r, p) ->
            val out = p.inputStream.bufferedReader().readText()
            p.waitFor(60, TimeUnit.SECONDS) shouldBe true
            p.exitValue() shouldBe 0
            out.lines().firstOrNull { it.startsWith("rank ") } ?: error("rank $r printed no result:\n$out")
        }
        lines shouldContainExactlyInAnyOrder listOf("rank 0 of 3 saw 3", "rank 1 of 3 saw 3", "rank 2 of 3 saw 3")
    }
})
