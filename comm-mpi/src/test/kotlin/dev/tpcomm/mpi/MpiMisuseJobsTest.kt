package dev.tpcomm.mpi

import dev.tpcomm.mpi.jobs.Launcher
import dev.tpcomm.mpi.jobs.MpiJobs
import dev.tpcomm.mpi.jobs.MpiMisuseMain
import dev.tpcomm.mpi.jobs.caseJobTests
import dev.tpcomm.mpi.jobs.launcherInstalled
import io.kotest.core.spec.style.FunSpec
import kotlin.time.Duration.Companion.minutes

/**
 * [MpiMisuseMain] in real 3-rank jobs under every installed launcher: caller deadlines
 * (`withTimeout`, `awaitAll`) in blocking and non-blocking mode, memory MPI cannot be given
 * (heap, read-only, freed), sizes past MPI's int count, tags past `MPI_TAG_UB`, and the in-place
 * all-gather alias. Each job runs once (on its first test); one test per case, judged over all ranks.
 */
class MpiMisuseJobsTest : FunSpec({
    val np = 3
    for (launcher in Launcher.entries) {
        val suite = "misuse.${launcher.id}.np$np"
        if (!launcherInstalled(suite, launcher)) continue
        caseJobTests(suite, np, MpiMisuseMain.CASES, 5.minutes) { out ->
            MpiJobs.runMpi(launcher, np, MpiMisuseMain::class.java.name, listOf(out), limitSeconds = 240)
        }
    }
})
