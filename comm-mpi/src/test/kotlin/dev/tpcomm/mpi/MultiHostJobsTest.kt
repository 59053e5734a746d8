package dev.tpcomm.mpi

import dev.tpcomm.mpi.jobs.Launcher
import dev.tpcomm.mpi.jobs.MpiJobs
import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.doubles.shouldBeLessThanOrEqual
import io.kotest.matchers.shouldBe
import io.kotest.matchers.shouldNotBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.string.shouldNotContain
import java.io.File
import java.nio.file.Files
import java.nio.file.Path
import java.util.concurrent.TimeUnit
import kotlin.time.Duration.Companion.minutes

/**
 * Jobs across hosts: `scripts/multihost.sh` makes two "hosts" (network namespaces on a bridge,
 * the launcher on a third, the login host), and Open MPI's mpirun and MPICH's hydra start 2 ranks
 * on each through the script's ssh stand-in, talking TCP between the namespaces.
 *
 * - `multihost.<impl>.conformance`: comm-testkit's conformance suite ([dev.tpcomm.mpi.jobs.MpiConformanceMain])
 *   across 2 hosts x 2 ranks passes.
 * - `multihost.<impl>.linkcut`: while every rank all-reduces ([dev.tpcomm.mpi.jobs.MpiLinkCutMain],
 *   timeout 10 s), the second host's link goes down. The ranks on the first host must name the failure
 *   and be gone within the timeout + 5 s of the cut, the job must exit non-zero and, on Open MPI, the
 *   launcher must have ended within the same budget. (MPICH 4.0's hydra waits for the lost host's proxy
 *   whatever happens: that check is reported as disabled; docs/mpi.md, "Across hosts".)
 *
 * Needs root, iproute2 and util-linux (`ip netns`, `unshare`); without them the tests are disabled
 * (shown as skipped), as with `TPCOMM_SKIP_MULTIHOST=1`. The demo across hosts runs in comm-examples'
 * `MultiHostDemoTest`.
 */
class MultiHostJobsTest : FunSpec({
    val script = MultiHost.script
    val why = MultiHost.unavailableReason()

    for (launcher in Launcher.entries) {
        context("multihost.${launcher.id}").config(timeout = 10.minutes) {
            if (why != null) {
                test("multihost.${launcher.id} ($why)").config(enabled = false) {}
            } else if (launcher.path == null) {
                if (MpiJobs.allowMissing) test("${launcher.command} installed").config(enabled = false) {}
                else test("${launcher.command} installed") { error("${launcher.command} is not on PATH: install ${launcher.packages}, or set TPCOMM_ALLOW_MISSING_MPI=1") }
            } else {
            context("multihost.${launcher.id}.conformance") {
                val job = MultiHost.run(script, listOf("--mpi", launcher.id, "--scenario", "conformance", "--cp", MpiJobs.classpath, "run"), 420)
                println(job.output.lineSequence().filter { it.startsWith("multihost: conformance") || it.startsWith("multihost: job exit") }.joinToString("\n"))
                test("multihost.${launcher.id}.conformance: the suite passes on 2 hosts x 2 ranks") {
                    withClue(job.toString()) {
                        job.timedOut shouldBe false
                        val finalizeHang = "MPI_Finalize did not complete" in job.output || "MPI_Finalize did not return" in job.output
                        if (launcher.id == "mpich" && job.exitCode != 0 && finalizeHang) {
                            // MPICH 4.0.2 across namespaces: MPI_Finalize sometimes never completes after every
                            // case passed (docs/mpi.md, "Across hosts"). Each rank leaves it 10 s after every rank
                            // reached it; hydra, answering a PMI barrier of a rank that left, may then end the job
                            // with 255 ("HYDU_sock_write ... Bad file descriptor"). The cases themselves must all
                            // have passed on every rank.
                            job.output shouldNotContain "wrote no report"
                            Regex("conformance over 2 hosts x 2 ranks: [1-9][0-9]* passed, 0 failed").containsMatchIn(job.output) shouldBe true
                            println("multihost.mpich.conformance: every case passed; MPICH's MPI_Finalize did not complete (known, docs/mpi.md)")
                        } else {
                            job.output shouldContain "conformance: PASSED"
                            job.exitCode shouldBe 0
                        }
                    }
                }
            }
            context("multihost.${launcher.id}.linkcut") {
                val timeout = 10.0
                val grace = 5.0
                val job = MultiHost.run(script, listOf("--mpi", launcher.id, "--scenario", "linkcut", "--timeout", "10", "--grace", "5",
                    "--cp", MpiJobs.classpath, "run"), 300)
                val result = MultiHost.result(job.output)
                // The measured seconds, for the build log (docs/mpi.md "When a host is cut off").
                println("multihost.${launcher.id}.linkcut: $result")
                test("multihost.${launcher.id}.linkcut: the ranks on the host that kept its link are gone within timeout + 5 s of the cut") {
                    withClue(job.toString()) {
                        val gone = result["survivors_gone"]
                        gone shouldNotBe null
                        gone shouldNotBe "never"
                        gone!!.toDouble() shouldBeLessThanOrEqual timeout + grace
                    }
                }
                test("multihost.${launcher.id}.linkcut: a rank on the host that kept its link names the failure") {
                    withClue(job.toString()) { result["named"] shouldNotBe null; result["named"] shouldNotBe "none" }
                }
                test("multihost.${launcher.id}.linkcut: the job exits non-zero") {
                    withClue(job.toString()) { result["exit"] shouldNotBe null; result["exit"] shouldNotBe "0" }
                }
                // MPICH 4.0.2's hydra sends nothing to the lost host's proxy after an abort and keeps
                // waiting for its exit status (its control socket has no keepalive); an exiting ssh does
                // not end it either. Measured: still running 109 s after the cut, until killed.
                val hydra = launcher == Launcher.Mpich
                test("multihost.${launcher.id}.linkcut: the launcher ends within timeout + 5 s of the cut" +
                    if (hydra) " (hydra waits for the lost host: known, docs/mpi.md)" else "").config(enabled = !hydra) {
                    withClue(job.toString()) {
                        val end = result["launcher_end"]
                        end shouldNotBe null
                        end shouldNotBe "never"
                        end!!.toDouble() shouldBeLessThanOrEqual timeout + grace
                    }
                }
            }
            }
        }
    }
})

/** Runs `scripts/multihost.sh` for the multi-host tests. */
internal object MultiHost {
    /** The script, found from the module directory Surefire runs in (or its parent). */
    val script: File = listOf("scripts/multihost.sh", "../scripts/multihost.sh").map { File(it).absoluteFile.normalize() }.firstOrNull { it.isFile }
        ?: File("../scripts/multihost.sh").absoluteFile.normalize()

    /** Null when multi-host jobs can run here, otherwise why not. */
    fun unavailableReason(): String? {
        if (System.getenv("TPCOMM_SKIP_MULTIHOST") == "1") return "TPCOMM_SKIP_MULTIHOST=1"
        if (!script.isFile) return "no ${script.path}"
        val uid = runCatching { ProcessBuilder("id", "-u").start().inputStream.bufferedReader().readText().trim() }.getOrNull()
        if (uid != "0") return "needs root for network namespaces"
        val path = System.getenv("PATH").orEmpty().split(':') + listOf("/usr/sbin", "/sbin")
        for (tool in listOf("ip", "unshare", "flock")) if (path.none { File(it, tool).canExecute() }) return "needs $tool"
        // Root in a container may still be refused new network namespaces (no CAP_SYS_ADMIN).
        val probe = runCatching { ProcessBuilder("unshare", "--net", "--uts", "true").start().waitFor() }.getOrDefault(-1)
        if (probe != 0) return "this machine refuses new network namespaces (unshare --net failed)"
        return null
    }

    class Result(val exitCode: Int, val timedOut: Boolean, val elapsedMillis: Long, val output: String) {
        override fun toString(): String = "exit $exitCode${if (timedOut) " (killed: wall-clock limit)" else ""} after $elapsedMillis ms\n${output.takeLast(8000)}"
    }

    fun run(script: File, args: List<String>, limitSeconds: Long): Result {
        val log = Files.createTempFile("tpcomm-multihost", ".log")
        val pb = ProcessBuilder(listOf("bash", script.path) + args).redirectErrorStream(true).redirectOutput(log.toFile())
        pb.environment().keys.removeIf { it.startsWith("OMPI_") || it.startsWith("PMI") || it.startsWith("PMIX_") || it == "MPI_LOCALRANKID" }
        pb.environment()["JAVA"] = Path.of(System.getProperty("java.home"), "bin", "java").toString()
        val start = System.nanoTime()
        val p = pb.start()
        var finished = p.waitFor(limitSeconds, TimeUnit.SECONDS)
        if (!finished) {
            p.destroy() // SIGTERM: the script's trap removes the hosts and what runs in them
            finished = p.waitFor(30, TimeUnit.SECONDS)
            if (!finished) { p.descendants().forEach { it.destroyForcibly() }; p.destroyForcibly(); p.waitFor(10, TimeUnit.SECONDS) }
        }
        val result = Result(if (p.isAlive) -1 else p.exitValue(), !finished || p.isAlive, (System.nanoTime() - start) / 1_000_000, log.toFile().readText())
        Files.deleteIfExists(log)
        return result
    }

    /** The `multihost-result key=value ...` line the linkcut scenario prints, as a map. */
    fun result(output: String): Map<String, String> =
        output.lineSequence().lastOrNull { it.startsWith("multihost-result ") }
            ?.removePrefix("multihost-result ")?.split(' ')?.mapNotNull { kv -> kv.split('=', limit = 2).takeIf { it.size == 2 }?.let { it[0] to it[1] } }
            ?.toMap() ?: emptyMap()
}
