package dev.tpcomm.mpi

import dev.tpcomm.mpi.jobs.MpiWarmUpMain
import dev.tpcomm.mpi.jobs.caseJobTestsUnderEveryLauncher
import io.kotest.core.spec.style.FunSpec
import kotlin.time.Duration.Companion.minutes

/**
 * Issue 37: `CommConfig.warmUp` in real 2-rank jobs under every installed launcher, set the way a
 * job sets it, through the environment (`TPCOMM_WARM_UP_SECONDS=0.4` given to `mpirun`):
 * [MpiWarmUpMain]'s `Comm.create` returns after the warm-up, every rank having made the same calls.
 */
class MpiWarmUpJobsTest : FunSpec({
    caseJobTestsUnderEveryLauncher("warmup", 2, MpiWarmUpMain::class.java.name, MpiWarmUpMain.CASES, 3.minutes, limitSeconds = 120, env = mapOf("TPCOMM_WARM_UP_SECONDS" to "0.4"))
})
