package dev.tpcomm.mpi

import dev.tpcomm.mpi.jobs.Launcher
import dev.tpcomm.mpi.jobs.MpiJobs
import dev.tpcomm.mpi.jobs.MpiWarmUpMain
import dev.tpcomm.mpi.jobs.caseJobTests
import dev.tpcomm.mpi.jobs.launcherInstalled
import io.kotest.core.spec.style.FunSpec
import kotlin.time.Duration.Companion.minutes

/**
 * Issue 37: `CommConfig.warmUp` in real 2-rank jobs under every installed launcher, set the way a
 * job sets it, through the environment (`TPCOMM_WARM_UP_SECONDS=0.4` given to `mpirun`):
 * [MpiWarmUpMain]'s `Comm.create` returns after the warm-up, every rank having made the same calls.
 */
class MpiWarmUpJobsTest : FunSpec({
    val np = 2
    for (launcher in Launcher.entries) {
        val suite = "warmup.${launcher.id}.np$np"
        if (!launcherInstalled(suite, launcher)) continue
        caseJobTests(suite, np, MpiWarmUpMain.CASES, 3.minutes) { out ->
            MpiJobs.runMpi(launcher, np, MpiWarmUpMain::class.java.name, listOf(out), limitSeconds = 120, env = mapOf("TPCOMM_WARM_UP_SECONDS" to "0.4"))
        }
    }
})
