package dev.tpcomm.mpi

import dev.tpcomm.mpi.jobs.MpiMisuseMain
import dev.tpcomm.mpi.jobs.caseJobTestsUnderEveryLauncher
import io.kotest.core.spec.style.FunSpec
import kotlin.time.Duration.Companion.minutes

/**
 * [MpiMisuseMain] in real 3-rank jobs under every installed launcher: caller deadlines
 * (`withTimeout`, `awaitAll`) in blocking and non-blocking mode, memory MPI cannot be given
 * (heap, read-only, freed), sizes past MPI's int count, tags past `MPI_TAG_UB`, and the in-place
 * all-gather alias. Each job runs once (on its first test); one test per case, judged over all ranks.
 */
class MpiMisuseJobsTest : FunSpec({
    caseJobTestsUnderEveryLauncher("misuse", 3, MpiMisuseMain::class.java.name, MpiMisuseMain.CASES, 5.minutes, limitSeconds = 240)
})
