package dev.tpcomm.mpi.jobs

import java.io.File
import java.nio.file.Files
import java.nio.file.Path
import java.util.UUID
import java.util.concurrent.TimeUnit

/** An MPI implementation's launcher on this machine. */
enum class Launcher(val id: String, val command: String, val flags: List<String>, val packages: String) {
    OpenMpi("openmpi", "mpirun.openmpi", listOf("--allow-run-as-root", "--oversubscribe", "--bind-to", "none"), "openmpi-bin libopenmpi-dev"),
    Mpich("mpich", "mpirun.mpich", emptyList(), "mpich libmpich-dev");

    val path: String? get() = System.getenv("PATH").orEmpty().split(':').map { File(it, command) }.firstOrNull { it.canExecute() }?.path
}

/**
 * How a job ended. [rankExitCodes] (jobs run with [MpiJobs.runMpiPerRank]) holds each rank's exit
 * status as its wrapper shell saw it, or null for a rank the launcher killed together with its
 * wrapper (no status could be written). [endEpochMillis] is when the launcher exited.
 */
class JobResult(
    val exitCode: Int,
    val timedOut: Boolean,
    val elapsedMillis: Long,
    val stdout: String,
    val stderr: String,
    val rankExitCodes: List<Int?> = emptyList(),
    val endEpochMillis: Long = 0,
    /** Processes of the job still alive when the launcher exited (must be none). */
    val leftovers: Int = 0,
) {
    override fun toString(): String =
        "exit $exitCode${if (timedOut) " (killed: wall-clock limit)" else ""} after $elapsedMillis ms" +
            (if (rankExitCodes.isEmpty()) "" else ", ranks ${rankExitCodes.map { it?.toString() ?: "killed" }}") +
            "\n--- stdout\n${stdout.takeLast(6000)}\n--- stderr\n${stderr.takeLast(6000)}"

    /** Each rank's status in words (`0`, `14`, `killed by the launcher`). */
    val rankOutcomes: List<String> get() = rankExitCodes.map { it?.toString() ?: "killed by the launcher" }
}

/** Launches multi-process jobs of this module's test classes, each under a hard wall-clock limit. */
object MpiJobs {
    val classpath: String = System.getProperty("surefire.test.class.path")?.takeIf { it.isNotBlank() } ?: System.getProperty("java.class.path")

    val java: String = Path.of(System.getProperty("java.home"), "bin", "java").toString()

    val jvmFlags = listOf(
        "--enable-native-access=ALL-UNNAMED", "-Xss4m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
    )

    /** Whether missing MPI implementations may be skipped (`TPCOMM_ALLOW_MISSING_MPI=1`). */
    val allowMissing: Boolean get() = System.getenv("TPCOMM_ALLOW_MISSING_MPI") == "1"

    fun javaCommand(mainClass: String, args: List<String>, marker: String): List<String> =
        listOf(java) + jvmFlags + listOf("-Dtpcomm.job=$marker", "-cp", classpath, mainClass) + args

    fun runMpi(launcher: Launcher, np: Int, mainClass: String, args: List<String>, limitSeconds: Long, env: Map<String, String> = emptyMap()): JobResult {
        val marker = UUID.randomUUID().toString()
        val cmd = listOf(launcher.path ?: error("${launcher.command} not found")) + launcher.flags + listOf("-np", np.toString()) +
            javaCommand(mainClass, args, marker)
        return run(cmd, limitSeconds, env, marker)
    }

    /**
     * Like [runMpi], with each rank's JVM under a small shell wrapper that writes the JVM's exit
     * status to a file, so the result has every rank's exit code ([JobResult.rankExitCodes]).
     */
    fun runMpiPerRank(launcher: Launcher, np: Int, mainClass: String, args: List<String>, limitSeconds: Long, env: Map<String, String> = emptyMap()): JobResult {
        val marker = UUID.randomUUID().toString()
        val rcDir = Files.createTempDirectory("tpcomm-mpi-rc")
        val script = "\"$@\"; rc=\$?; echo \$rc > '$rcDir'/rank-\${OMPI_COMM_WORLD_RANK:-\$PMI_RANK}.rc; exit \$rc"
        val cmd = listOf(launcher.path ?: error("${launcher.command} not found")) + launcher.flags + listOf("-np", np.toString()) +
            listOf("sh", "-c", script, "sh") + javaCommand(mainClass, args, marker)
        val result = run(cmd, limitSeconds, env, marker)
        val codes = (0 until np).map { r -> rcDir.resolve("rank-$r.rc").toFile().takeIf { it.exists() }?.readText()?.trim()?.toIntOrNull() }
        rcDir.toFile().deleteRecursively()
        return JobResult(result.exitCode, result.timedOut, result.elapsedMillis, result.stdout, result.stderr, codes, result.endEpochMillis, result.leftovers)
    }

    fun runJava(mainClass: String, args: List<String>, limitSeconds: Long, env: Map<String, String> = emptyMap()): JobResult {
        val marker = UUID.randomUUID().toString()
        return run(javaCommand(mainClass, args, marker), limitSeconds, env, marker)
    }

    private fun run(command: List<String>, limitSeconds: Long, env: Map<String, String>, marker: String): JobResult {
        val dir = Files.createTempDirectory("tpcomm-mpi-job")
        val out = dir.resolve("stdout").toFile()
        val err = dir.resolve("stderr").toFile()
        val pb = ProcessBuilder(command).redirectOutput(out).redirectError(err)
        pb.environment().keys.removeIf { it.startsWith("OMPI_") || it.startsWith("PMI") || it.startsWith("PMIX_") || it == "MPI_LOCALRANKID" }
        pb.environment().putAll(env)
        val start = System.nanoTime()
        val p = pb.start()
        val finished = p.waitFor(limitSeconds, TimeUnit.SECONDS)
        if (!finished) {
            p.toHandle().descendants().forEach { it.destroyForcibly() }
            p.destroyForcibly()
            p.waitFor(10, TimeUnit.SECONDS)
            // mpirun's ranks may have been re-parented: kill what still runs our command line.
            ProcessHandle.allProcesses().filter { h -> h.info().commandLine().orElse("").contains(marker) }.forEach { it.destroyForcibly() }
        }
        val elapsed = (System.nanoTime() - start) / 1_000_000
        val end = System.currentTimeMillis()
        // Ranks the launcher left behind (it must end every rank before it exits); killed here.
        fun alive() = ProcessHandle.allProcesses().filter { h -> h.info().commandLine().orElse("").contains(marker) }.toList()
        var left = alive()
        val graceUntil = System.nanoTime() + 2_000_000_000L
        while (left.isNotEmpty() && System.nanoTime() < graceUntil) { Thread.sleep(100); left = alive() }
        left.forEach { it.destroyForcibly() }
        val result = JobResult(if (finished) p.exitValue() else -1, !finished, elapsed, out.readText(), err.readText(), endEpochMillis = end, leftovers = left.size)
        dir.toFile().deleteRecursively()
        return result
    }
}

/** One case's result on one rank, as a job main reports it. */
data class CaseOutcome(val case: String, val status: String, val message: String)

/**
 * The `rank-<r>.tsv` files through which job mains report per-case results (one line per case:
 * base64 case name, status, base64 message, optional further fields), as [MpiConformanceMain] writes them.
 */
object CaseReports {
    private val encoder = java.util.Base64.getEncoder()
    private val decoder = java.util.Base64.getDecoder()

    fun write(dir: Path, rank: Int, outcomes: List<CaseOutcome>) {
        Files.createDirectories(dir)
        Files.write(dir.resolve("rank-$rank.tsv"), outcomes.map {
            "${encoder.encodeToString(it.case.toByteArray())}\t${it.status}\t${encoder.encodeToString(it.message.toByteArray())}"
        })
    }

    /** Each rank's outcomes (empty for a rank that wrote no file). */
    fun read(dir: Path, np: Int): List<List<CaseOutcome>> = (0 until np).map { r ->
        val f = dir.resolve("rank-$r.tsv")
        if (!Files.exists(f)) emptyList() else Files.readAllLines(f).map { line ->
            val fields = line.split('\t')
            CaseOutcome(String(decoder.decode(fields[0])), fields[1], String(decoder.decode(fields[2])))
        }
    }
}
