package dev.tpcomm.mpi

import dev.tpcomm.mpi.jobs.MpiReproducibleMain
import dev.tpcomm.mpi.jobs.caseJobTestsUnderEveryLauncher
import io.kotest.core.spec.style.FunSpec
import kotlin.time.Duration.Companion.minutes

/**
 * Issue 36: [MpiReproducibleMain] in real 2-rank jobs under every installed launcher: a small
 * reproducible all-reduce or reduce is one operation of the MPI backend: an 8-byte one makes one
 * MPI call (the check's exchange carries it; before, the composite added an all-gather: the 8-byte
 * cases failed on e49f26e with `{allReduce(signature)=20, allReduce=20}`), a 4 KiB one the check
 * and one gather. Each job runs once (on its first test); one test per case, judged over all ranks.
 */
class MpiReproducibleJobsTest : FunSpec({
    caseJobTestsUnderEveryLauncher("reproducible", 2, MpiReproducibleMain::class.java.name, MpiReproducibleMain.CASES, 3.minutes, limitSeconds = 120)
})
