package dev.tpcomm.mpi

import dev.tpcomm.mpi.jobs.MpiDefaultMismatchMain
import dev.tpcomm.mpi.jobs.caseJobTestsUnderEveryLauncher
import io.kotest.core.spec.style.FunSpec
import kotlin.time.Duration.Companion.minutes

/**
 * Issue 20 item 2: [MpiDefaultMismatchMain] in real 3-rank jobs under every installed launcher.
 * With the default configuration a mismatched collective is a [dev.tpcomm.CollectiveMismatchException]
 * on every rank (an uneven all-gather returned garbage on the last rank and MPI_ERR_TRUNCATE
 * elsewhere). Each job runs once (on its first test); one test per case, judged over all ranks.
 */
class MpiDefaultMismatchJobsTest : FunSpec({
    caseJobTestsUnderEveryLauncher("mismatch.default", 3, MpiDefaultMismatchMain::class.java.name, MpiDefaultMismatchMain.CASES, 5.minutes, limitSeconds = 180)
})
