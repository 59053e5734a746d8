package dev.tpcomm.mpi

import dev.tpcomm.mpi.jobs.CaseOutcome
import dev.tpcomm.mpi.jobs.CaseReports
import dev.tpcomm.mpi.jobs.JobResult
import dev.tpcomm.mpi.jobs.Launcher
import dev.tpcomm.mpi.jobs.MpiJobs
import dev.tpcomm.mpi.jobs.MpiDefaultMismatchMain
import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import java.nio.file.Files
import kotlin.time.Duration.Companion.minutes

/**
 * Issue 20 item 2: [MpiDefaultMismatchMain] in real 3-rank jobs under every installed launcher.
 * With the default configuration a mismatched collective is a [dev.tpcomm.CollectiveMismatchException]
 * on every rank (an uneven all-gather returned garbage on the last rank and MPI_ERR_TRUNCATE
 * elsewhere). Each job runs once (on its first test); one test per case, judged over all ranks.
 */
class MpiDefaultMismatchJobsTest : FunSpec({
    class Run(val job: JobResult, val perRank: List<List<CaseOutcome>>)

    val np = 3
    for (launcher in Launcher.entries) {
        if (launcher.path == null) {
            test("mismatch.default.${launcher.id}.np$np: ${launcher.command} installed").config(enabled = !MpiJobs.allowMissing) {
                error("${launcher.command} is not on PATH: install ${launcher.packages}, or set TPCOMM_ALLOW_MISSING_MPI=1 to skip")
            }
            continue
        }
        val run = lazy {
            val out = Files.createTempDirectory("tpcomm-mismatch")
            try {
                val job = MpiJobs.runMpi(launcher, np, MpiDefaultMismatchMain::class.java.name, listOf(out.toString()), limitSeconds = 180)
                Run(job, CaseReports.read(out, np))
            } finally {
                out.toFile().deleteRecursively()
            }
        }
        test("mismatch.default.${launcher.id}.np$np: the job exits 0 and every rank reports every case").config(timeout = 5.minutes) {
            val r = run.value
            withClue(r.job.toString()) {
                r.job.timedOut shouldBe false
                r.job.exitCode shouldBe 0
                r.perRank.map { outcomes -> outcomes.map { it.case } } shouldBe List(np) { MpiDefaultMismatchMain.CASES }
            }
        }
        for (case in MpiDefaultMismatchMain.CASES) {
            test("mismatch.default.${launcher.id}.np$np: $case").config(timeout = 5.minutes) {
                val r = run.value
                val outcomes = r.perRank.mapIndexedNotNull { rank, list -> list.firstOrNull { it.case == case }?.let { rank to it } }
                val failed = outcomes.filter { it.second.status != "Passed" }
                withClue(failed.joinToString("\n") { "rank ${it.first}: ${it.second.message}" }.ifEmpty { r.job.toString() }) {
                    failed.size shouldBe 0
                    outcomes.size shouldBe np
                }
            }
        }
    }
})
