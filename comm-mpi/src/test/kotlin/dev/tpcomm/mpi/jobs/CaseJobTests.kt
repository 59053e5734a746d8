package dev.tpcomm.mpi.jobs

import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import java.nio.file.Files
import kotlin.time.Duration

/**
 * Registers the tests of one job whose main reports per-case outcomes through [CaseReports]: the job
 * runs once, on the first of these tests to run ([launch] gets the folder the ranks report into);
 * one test checks that it exited 0 with every rank reporting every case of [cases], in order, and
 * one test per case checks that it passed on all [np] ranks (its failures name the rank and message).
 */
fun FunSpec.caseJobTests(suite: String, np: Int, cases: List<String>, timeout: Duration, launch: (outDir: String) -> JobResult) {
    class Run(val job: JobResult, val perRank: List<List<CaseOutcome>>)

    val run = lazy {
        val out = Files.createTempDirectory("tpcomm-cases")
        try {
            Run(launch(out.toString()), CaseReports.read(out, np))
        } finally {
            out.toFile().deleteRecursively()
        }
    }
    test("$suite: the job exits 0 and every rank reports every case").config(timeout = timeout) {
        val r = run.value
        withClue(r.job.toString()) {
            r.job.timedOut shouldBe false
            r.job.exitCode shouldBe 0
            r.perRank.map { outcomes -> outcomes.map { it.case } } shouldBe List(np) { cases }
        }
    }
    for (case in cases) {
        test("$suite: $case").config(timeout = timeout) {
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

/**
 * [caseJobTests] for a job of [np] ranks running [mainClass] under each [Launcher], the suites named
 * `<name>.<launcher id>.np<np>`; a launcher that is not installed gets [launcherInstalled]'s failing
 * test instead. [limitSeconds] bounds each job; [env] is given to the launcher.
 */
fun FunSpec.caseJobTestsUnderEveryLauncher(
    name: String, np: Int, mainClass: String, cases: List<String>, timeout: Duration, limitSeconds: Long, env: Map<String, String> = emptyMap(),
) {
    for (launcher in Launcher.entries) {
        val suite = "$name.${launcher.id}.np$np"
        if (!launcherInstalled(suite, launcher)) continue
        caseJobTests(suite, np, cases, timeout) { out -> MpiJobs.runMpi(launcher, np, mainClass, listOf(out), limitSeconds, env) }
    }
}

/**
 * For a launcher that is not installed: a test named `<suite>: <command> installed` that fails
 * saying what to install (disabled with `TPCOMM_ALLOW_MISSING_MPI=1`). Returns false then, true
 * when [launcher] is installed.
 */
fun FunSpec.launcherInstalled(suite: String, launcher: Launcher): Boolean {
    if (launcher.path != null) return true
    test("$suite: ${launcher.command} installed").config(enabled = !MpiJobs.allowMissing) {
        error("${launcher.command} is not on PATH: install ${launcher.packages}, or set TPCOMM_ALLOW_MISSING_MPI=1 to skip")
    }
    return false
}
