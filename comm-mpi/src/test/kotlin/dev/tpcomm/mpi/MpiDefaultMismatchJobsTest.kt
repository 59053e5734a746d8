package dev.tpcomm.mpi

import dev.tpcomm.mpi.jobs.Launcher
import dev.tpcomm.mpi.jobs.MpiDefaultMismatchMain
import dev.tpcomm.mpi.jobs.MpiJobs
import dev.tpcomm.mpi.jobs.caseJobTests
import dev.tpcomm.mpi.jobs.launcherInstalled
import io.kotest.core.spec.style.FunSpec
import kotlin.time.Duration.Companion.minutes

/**
 * Issue 20 item 2: [MpiDefaultMismatchMain] in real 3-rank jobs under every installed launcher.
 * With the default configuration a mismatched collective is a [dev.tpcomm.CollectiveMismatchException]
 * on every rank (an uneven all-gather returned garbage on the last rank and MPI_ERR_TRUNCATE
 * elsewhere). Each job runs once (on its first test); one test per case, judged over all ranks.
 */
class MpiDefaultMismatchJobsTest : FunSpec({
    val np = 3
    for (launcher in Launcher.entries) {
        val suite = "mismatch.default.${launcher.id}.np$np"
        if (!launcherInstalled(suite, launcher)) continue
        caseJobTests(suite, np, MpiDefaultMismatchMain.CASES, 5.minutes) { out ->
            MpiJobs.runMpi(launcher, np, MpiDefaultMismatchMain::class.java.name, listOf(out), limitSeconds = 180)
        }
    }
})
