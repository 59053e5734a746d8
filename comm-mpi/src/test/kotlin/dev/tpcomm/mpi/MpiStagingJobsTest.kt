package dev.tpcomm.mpi

import dev.tpcomm.mpi.jobs.CaseOutcome
import dev.tpcomm.mpi.jobs.CaseReports
import dev.tpcomm.mpi.jobs.JobResult
import dev.tpcomm.mpi.jobs.Launcher
import dev.tpcomm.mpi.jobs.MpiJobs
import dev.tpcomm.mpi.jobs.MpiStagingMain
import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import java.nio.file.Files
import kotlin.time.Duration.Companion.minutes

/**
 * [MpiStagingMain] in real MPI: an MPI singleton of one rank (no launcher), and 2-rank jobs under
 * every installed launcher. Each job runs once (on its first test); one test per job and case,
 * judged over all ranks.
 */
class MpiStagingJobsTest : FunSpec({
    class Run(val job: JobResult, val perRank: List<List<CaseOutcome>>)

    fun run(np: Int, launch: (String) -> JobResult): Lazy<Run> = lazy {
        val out = Files.createTempDirectory("tpcomm-staging")
        try {
            val job = launch(out.toString())
            Run(job, CaseReports.read(out, np))
        } finally {
            out.toFile().deleteRecursively()
        }
    }

    val suites = buildList {
        add(Triple("staging.singleton", 1, run(1) { out -> MpiJobs.runJava(MpiStagingMain::class.java.name, listOf(out), limitSeconds = 120) }))
        for (launcher in Launcher.entries) {
            if (launcher.path == null) {
                test("staging.${launcher.id}.np2: ${launcher.command} installed").config(enabled = !MpiJobs.allowMissing) {
                    error("${launcher.command} is not on PATH: install ${launcher.packages}, or set TPCOMM_ALLOW_MISSING_MPI=1 to skip")
                }
            } else {
                add(Triple("staging.${launcher.id}.np2", 2, run(2) { out -> MpiJobs.runMpi(launcher, 2, MpiStagingMain::class.java.name, listOf(out), limitSeconds = 120) }))
            }
        }
    }

    for ((suite, np, run) in suites) {
        test("$suite: the job exits 0 and every rank reports every case").config(timeout = 3.minutes) {
            val r = run.value
            withClue(r.job.toString()) {
                r.job.timedOut shouldBe false
                r.job.exitCode shouldBe 0
                r.perRank.map { outcomes -> outcomes.map { it.case } } shouldBe List(np) { MpiStagingMain.CASES }
            }
        }
        for (case in MpiStagingMain.CASES) {
            test("$suite: $case").config(timeout = 3.minutes) {
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
