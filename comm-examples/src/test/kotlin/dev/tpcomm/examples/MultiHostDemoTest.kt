package dev.tpcomm.examples

import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.io.File
import java.nio.file.Files
import java.nio.file.Path
import java.util.concurrent.TimeUnit

/**
 * The demo across hosts: `scripts/multihost.sh --scenario demo` runs [main] on 2 "hosts" (network
 * namespaces) x 2 ranks under Open MPI's mpirun and MPICH's hydra, each reaching the hosts through
 * the script's ssh stand-in; exit code 0 means the tensor-parallel model matched the dense one.
 * Needs root, iproute2 and util-linux; otherwise (or with `TPCOMM_SKIP_MULTIHOST=1`) disabled. An MPI
 * implementation that is not installed is skipped here (comm-mpi's tests insist on both). Under
 * MPICH 4.0.2 with UCX 1.13, `MPI_Finalize` sometimes never returns after the demo finished (one run
 * in three on this machine): the ranks end themselves at the timeout plus 2 s and the script accepts
 * the run, saying so, once the model matched (docs/mpi.md, "Across hosts").
 */
class MultiHostDemoTest : FunSpec({
    val script = listOf("scripts/multihost.sh", "../scripts/multihost.sh").map { File(it).absoluteFile.normalize() }.firstOrNull { it.isFile }
    val path = System.getenv("PATH").orEmpty().split(File.pathSeparator) + listOf("/usr/sbin", "/sbin")
    val uid = runCatching { ProcessBuilder("id", "-u").start().inputStream.bufferedReader().readText().trim() }.getOrNull()
    val why = when {
        System.getenv("TPCOMM_SKIP_MULTIHOST") == "1" -> "TPCOMM_SKIP_MULTIHOST=1"
        script == null -> "no scripts/multihost.sh"
        uid != "0" -> "needs root for network namespaces"
        listOf("ip", "unshare", "flock").any { tool -> path.none { File(it, tool).canExecute() } } -> "needs iproute2, util-linux"
        runCatching { ProcessBuilder("unshare", "--net", "--uts", "true").start().waitFor() }.getOrDefault(-1) != 0 ->
            "this machine refuses new network namespaces"
        else -> null
    }
    val classpath = System.getProperty("surefire.test.class.path")?.takeIf { it.isNotBlank() } ?: System.getProperty("java.class.path")

    for ((mpi, launcher) in listOf("openmpi" to "mpirun.openmpi", "mpich" to "mpiexec.hydra")) {
        val installed = path.any { File(it, launcher).canExecute() }
        val name = "multihost.$mpi.demo: the demo on 2 hosts x 2 ranks matches the dense model" +
            (why?.let { " ($it)" } ?: if (!installed) " ($launcher not installed)" else "")
        test(name).config(enabled = why == null && installed) {
            val log = Files.createTempFile("tpcomm-multihost-demo", ".log")
            // The script's own --limit ends a stuck job and prints its log; this test waits longer.
            val pb = ProcessBuilder("bash", script!!.path, "--mpi", mpi, "--scenario", "demo", "--limit", "240", "--cp", classpath, "run")
                .redirectErrorStream(true).redirectOutput(log.toFile())
            pb.environment().keys.removeIf { it.startsWith("OMPI_") || it.startsWith("PMI") || it.startsWith("PMIX_") }
            pb.environment()["JAVA"] = Path.of(System.getProperty("java.home"), "bin", "java").toString()
            val p = pb.start()
            var finished = p.waitFor(330, TimeUnit.SECONDS)
            if (!finished) {
                p.destroy() // SIGTERM: the script's trap removes the hosts
                finished = p.waitFor(30, TimeUnit.SECONDS)
                if (!finished) { p.descendants().forEach { it.destroyForcibly() }; p.destroyForcibly() }
            }
            val out = log.toFile().readText()
            Files.deleteIfExists(log)
            withClue(out.takeLast(8000)) {
                finished shouldBe true
                out shouldContain "matches dense"
                out shouldContain "demo: PASSED"
                p.exitValue() shouldBe 0
            }
            // MPICH 4.0.2 + UCX 1.13: MPI_Finalize sometimes never returns across the namespaces
            // (the script accepts it once the model matched, and says so): report it, visibly.
            if ("MPI_Finalize did not complete" in out) println("multihost.$mpi.demo: the model matched; MPI_Finalize did not complete (known, docs/mpi.md)")
        }
    }
})
