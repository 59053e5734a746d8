package dev.tpcomm.mpi

import dev.tpcomm.mpi.jobs.MpiJobs
import dev.tpcomm.mpi.jobs.MpiStagingMain
import dev.tpcomm.mpi.jobs.caseJobTests
import dev.tpcomm.mpi.jobs.caseJobTestsUnderEveryLauncher
import io.kotest.core.spec.style.FunSpec
import kotlin.time.Duration.Companion.minutes

/**
 * [MpiStagingMain] in real MPI: an MPI singleton of one rank (no launcher), and 2-rank jobs under
 * every installed launcher. Each job runs once (on its first test); one test per job and case,
 * judged over all ranks.
 */
class MpiStagingJobsTest : FunSpec({
    caseJobTests("staging.singleton", 1, MpiStagingMain.CASES, 3.minutes) { out ->
        MpiJobs.runJava(MpiStagingMain::class.java.name, listOf(out), limitSeconds = 120)
    }
    caseJobTestsUnderEveryLauncher("staging", 2, MpiStagingMain::class.java.name, MpiStagingMain.CASES, 3.minutes, limitSeconds = 120)
})
