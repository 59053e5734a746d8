package dev.tpcomm.mpi

import dev.tpcomm.mpi.jobs.Launcher
import dev.tpcomm.mpi.jobs.MpiConformanceMain
import dev.tpcomm.mpi.jobs.MpiFailureMain
import dev.tpcomm.mpi.jobs.MpiJobs
import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.shouldNotBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.longs.shouldBeLessThan
import java.nio.file.Files
import dev.tpcomm.mpi.jobs.CaseReports
import kotlin.time.Duration.Companion.minutes

/**
 * Multi-process tests: comm-testkit's conformance suite inside real `mpirun` jobs of 1 to 4 ranks
 * on Open MPI and MPICH (one Kotest container per job, named `mpi.<impl>.np<N>`, or
 * `mpi.<impl>.single.np3` and `mpi.<impl>.serialized.np2` for the jobs below `MPI_THREAD_MULTIPLE`, one test per
 * case), plus the failure jobs (a stalled rank, a killed rank, a missing library). Every job has a
 * hard wall-clock limit. A missing implementation fails its tests unless `TPCOMM_ALLOW_MISSING_MPI=1`.
 */
class MpiJobsTest : FunSpec({
    val rankCounts = (System.getProperty("tpcomm.mpi.ranks") ?: "1,2,3,4").split(',').map { it.trim().toInt() }

    for (launcher in Launcher.entries) {
        context("mpi.${launcher.id}").config(timeout = 30.minutes) {
            if (launcher.path == null) {
                if (MpiJobs.allowMissing) {
                    test("${launcher.command} installed").config(enabled = false) {}
                } else {
                    test("${launcher.command} installed") {
                        error("${launcher.command} is not on PATH: install ${launcher.packages} (scripts/test.sh does), or set TPCOMM_ALLOW_MISSING_MPI=1 to skip")
                    }
                }
            }
            // Every rank count with the default thread level, and the levels whose communicators share
            // one MPI thread: MPI_THREAD_SINGLE on 3 ranks, MPI_THREAD_SERIALIZED on 2.
            val jobs = rankCounts.map { it to null } + listOf(3 to "Single", 2 to "Serialized")
            if (launcher.path != null) for ((np, threadLevel) in jobs) {
                val suite = if (threadLevel == null) "mpi.${launcher.id}.np$np" else "mpi.${launcher.id}.${threadLevel.lowercase()}.np$np"
                context(suite) {
                    val out = Files.createTempDirectory("tpcomm-$suite")
                    val env = if (threadLevel == null) emptyMap() else mapOf("TPCOMM_MPI_THREAD_LEVEL" to threadLevel)
                    val job = MpiJobs.runMpi(launcher, np, MpiConformanceMain::class.java.name, listOf(out.toString(), suite), limitSeconds = 300, env = env)
                    test("$suite job exits 0") {
                        withClue(job.toString()) { job.timedOut shouldBe false; job.exitCode shouldBe 0 }
                    }
                    val perRank = CaseReports.read(out, np)
                    val cases = perRank.flatten().map { it.case }.distinct()
                    test("$suite every rank reported") {
                        withClue(job.toString()) { perRank.all { it.isNotEmpty() } shouldBe true }
                    }
                    for (case in cases) {
                        val outcomes = perRank.mapIndexedNotNull { r, list -> list.firstOrNull { it.case == case }?.let { r to it } }
                        val skipped = outcomes.all { it.second.status == "Skipped" }
                        test("$suite $case").config(enabled = !skipped) {
                            val failed = outcomes.filter { it.second.status == "Failed" }
                            withClue(failed.joinToString("\n") { "rank ${it.first}: ${it.second.message}" }) {
                                failed.size shouldBe 0
                                outcomes.size shouldBe np
                            }
                        }
                    }
                    out.toFile().deleteRecursively()
                }
            }
            if (launcher.path != null) test("mpi.${launcher.id}.np3 a stalled rank ends the job within the deadline plus grace, with the diagnostic") {
                val timeout = 3
                val job = MpiJobs.runMpi(launcher, 3, MpiFailureMain::class.java.name, listOf("stall", "$timeout"), limitSeconds = 120)
                withClue(job.toString()) {
                    job.timedOut shouldBe false
                    job.exitCode shouldNotBe 0
                    (job.stdout + job.stderr) shouldContain "did not complete within"
                    (job.stdout + job.stderr) shouldContain "flight recorder"
                    job.elapsedMillis shouldBeLessThan 90_000L
                }
            }
            if (launcher.path != null) test("mpi.${launcher.id}.np3 a killed rank ends the job non-zero, not a hang") {
                val job = MpiJobs.runMpi(launcher, 3, MpiFailureMain::class.java.name, listOf("kill", "5"), limitSeconds = 120)
                withClue(job.toString()) {
                    job.timedOut shouldBe false
                    job.exitCode shouldNotBe 0
                }
            }
        }
    }

    test("a missing MPI library gives BackendUnavailableException naming what was tried and the package") {
        val job = MpiJobs.runJava(MpiFailureMain::class.java.name, listOf("stall"), limitSeconds = 60,
            env = mapOf("TPCOMM_MPI_LIBRARY" to "/nonexistent/libmpi.so.40"))
        withClue(job.toString()) {
            job.exitCode shouldBe 3
            job.stderr shouldContain "/nonexistent/libmpi.so.40"
            job.stderr shouldContain "apt-get install"
        }
    }
})
