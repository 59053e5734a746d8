package dev.tpcomm.bench.flight

import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import java.io.File
import java.nio.file.Files
import java.util.concurrent.TimeUnit

/**
 * Real MPI jobs of 3 ranks (Open MPI and MPICH, each rank a JVM) that break one rank at one
 * collective; the analyzer must name that rank and that collective from the dumps the ranks wrote.
 * Skipped when the launcher is not installed (and `TPCOMM_ALLOW_MISSING_MPI=1`).
 */
class FlightAnalyzerMpiJobsTest : FunSpec({
    data class Case(val launcher: String, val fault: String, val culprit: Int, val at: Int, val kind: FlightAnalyzer.Kind)

    val cases = listOf(
        Case("mpirun.openmpi", "sleep", 1, 4, FlightAnalyzer.Kind.NeverReached),
        Case("mpirun.openmpi", "root", 2, 2, FlightAnalyzer.Kind.Mismatch),
        Case("mpirun.openmpi", "killed", 2, 3, FlightAnalyzer.Kind.MissingDump),
        Case("mpirun.openmpi", "straggler", 0, 5, FlightAnalyzer.Kind.Straggler),
        // Issue 20 item 4: rank 2 sleeps 30 s before collective 13, timeout 3 s. The first rank to time
        // out tells the others (abort notice) and waits before MPI_Abort, so every rank, the sleeping one
        // included, has written its dump when the launcher ends the job (both launchers kill at once).
        Case("mpirun.openmpi", "sleeplong", 2, 13, FlightAnalyzer.Kind.NeverReached),
        Case("mpirun.mpich", "sleeplong", 2, 13, FlightAnalyzer.Kind.NeverReached),
        // Not "killed" on MPICH: its launcher ends the job with SIGKILL, so ranks that had not dumped
        // yet leave no dump and are named missing too.
        Case("mpirun.mpich", "straggler", 2, 4, FlightAnalyzer.Kind.Straggler),
        Case("mpirun.mpich", "root", 1, 5, FlightAnalyzer.Kind.Mismatch),
        // Nothing goes wrong: every rank dumps on demand at the end and the verdict must be healthy,
        // whatever the clock each rank's recorder stamps its calls with.
        Case("mpirun.openmpi", "none", -1, 6, FlightAnalyzer.Kind.Healthy),
        Case("mpirun.mpich", "none", -1, 6, FlightAnalyzer.Kind.Healthy),
    )
    for (c in cases) {
        val path = System.getenv("PATH").orEmpty().split(':').map { File(it, c.launcher) }.firstOrNull { it.canExecute() }
        test("${c.launcher} -np 3: ${c.fault} by rank ${c.culprit} at collective ${c.at}").config(
            enabled = path != null || System.getenv("TPCOMM_ALLOW_MISSING_MPI") != "1",
        ) {
            val dir = Files.createTempDirectory("tpcomm-mpi-fr")
            val java = ProcessHandle.current().info().command().get()
            val flags = if (c.launcher.endsWith("openmpi")) listOf("--allow-run-as-root", "--oversubscribe", "--bind-to", "none") else emptyList()
            val cmd = listOf(path?.path ?: error("${c.launcher} not installed")) + flags + listOf("-np", "3", java,
                "--enable-native-access=ALL-UNNAMED", "-Xss4m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-cp", System.getProperty("java.class.path"), MpiScenarioMain::class.java.name,
                dir.toString(), c.fault, "${c.culprit}", "${c.at}")
            val log = dir.resolveSibling("${dir.fileName}.log").toFile()
            val pb = ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(log)
            pb.environment().keys.removeIf { it.startsWith("OMPI_") || it.startsWith("PMI") || it.startsWith("PMIX_") }
            val p = pb.start()
            if (!p.waitFor(120, TimeUnit.SECONDS)) {
                p.toHandle().descendants().forEach { it.destroyForcibly() }
                p.destroyForcibly()
            }
            val result = FlightAnalyzer().analyze(dir)
            println("${c}:\n$result\n")
            withClue("the report:\n$result\n--- job output\n${log.readText().takeLast(4000)}") {
                result.kind shouldBe c.kind
                result.culprits shouldBe (if (c.culprit < 0) emptyList() else listOf(c.culprit))
                result.sequence shouldBe (if (c.culprit < 0) null else c.at.toLong())
            }
        }
    }
})
