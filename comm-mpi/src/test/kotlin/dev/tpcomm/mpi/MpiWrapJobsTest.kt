package dev.tpcomm.mpi

import dev.tpcomm.mpi.jobs.Launcher
import dev.tpcomm.mpi.jobs.MpiJobs
import dev.tpcomm.mpi.jobs.MpiWrapMain
import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain

/**
 * [MpiBackendFactory.wrap] of an application's own `MPI_Comm` ([MpiWrapMain]) in real 3-rank jobs
 * under every installed launcher: the tpcomm communicator works, and after its close the
 * application's handle is still usable and freed by the application (tpcomm never freed it).
 */
class MpiWrapJobsTest : FunSpec({
    val np = 3
    for (launcher in Launcher.entries) {
        test("wrap.${launcher.id}.np$np: an existing MPI communicator is wrapped, used, closed, and stays the owner's").config(
            enabled = launcher.path != null || !MpiJobs.allowMissing,
        ) {
            if (launcher.path == null) error("${launcher.command} is not on PATH: install ${launcher.packages}, or set TPCOMM_ALLOW_MISSING_MPI=1 to skip")
            val job = MpiJobs.runMpi(launcher, np, MpiWrapMain::class.java.name, emptyList(), limitSeconds = 180)
            withClue(job.toString()) {
                job.timedOut shouldBe false
                job.exitCode shouldBe 0
                for (r in 0 until np) job.stdout shouldContain "WRAP OK rank $r"
            }
        }
    }
})
