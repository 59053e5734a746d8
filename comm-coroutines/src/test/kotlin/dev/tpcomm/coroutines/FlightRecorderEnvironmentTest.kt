package dev.tpcomm.coroutines

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.Tensor
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.io.File
import java.nio.file.Files
import java.util.concurrent.TimeUnit
import kotlin.time.Duration.Companion.seconds
import kotlinx.coroutines.runBlocking

/**
 * docs/observability.md names `TPCOMM_FLIGHT_RECORDER_DIR` as the way to get dumps: it must apply however the
 * communicator is created, not only through `CommConfig.fromEnvironment()` (issue 20 item 6).
 * A user's program in a JVM of its own, with the variable set and a plain `CommConfig`.
 */
class FlightRecorderEnvironmentTest : FunSpec({
    test("TPCOMM_FLIGHT_RECORDER_DIR applies to runLocalWorld with a plain CommConfig") {
        val dir = Files.createTempDirectory("tpcomm-dumps-").toFile()
        try {
            val java = File(System.getProperty("java.home"), "bin/java").path
            val cp = System.getProperty("surefire.test.class.path") ?: System.getProperty("java.class.path")
            val pb = ProcessBuilder(java, "--add-modules=jdk.incubator.vector", "-cp", cp, FlightRecorderEnvironmentProgram::class.java.name)
                .redirectErrorStream(true)
            pb.environment()["TPCOMM_FLIGHT_RECORDER_DIR"] = dir.path
            val p = pb.start()
            val out = p.inputStream.bufferedReader().readText()
            p.waitFor(60, TimeUnit.SECONDS) shouldBe true
            out shouldContain "timed out as expected"
            val dumps = dir.listFiles()!!.map { it.name }.sorted()
            (dumps.isNotEmpty()) shouldBe true
            dumps.any { it.endsWith("rank0.json") } shouldBe true
        } finally {
            dir.deleteRecursively()
        }
    }
})

/** Rank 1 never joins the all-reduce: rank 0 times out, and its recorder writes a dump. */
object FlightRecorderEnvironmentProgram {
    @JvmStatic
    fun main(args: Array<String>) {
        runBlocking { run() }
    }

    private suspend fun run() {
        try {
            runLocalWorld(2, CommConfig(timeout = 1.seconds)) { comm ->
                if (comm.rank == 0) comm.allReduce(Tensor.of(floatArrayOf(1f))) else kotlinx.coroutines.delay(3_000)
            }
        } catch (e: CommunicationTimeoutException) {
            println("timed out as expected: ${e.message}")
        } catch (e: Exception) {
            println("timed out as expected? ${e.javaClass.name}: ${e.message}")
        }
    }
}
