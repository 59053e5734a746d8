package dev.tpcomm.djl

import dev.tpcomm.djl.example.DataParallelMlp
import dev.tpcomm.djl.example.DataParallelMpiMain
import dev.tpcomm.mpi.jobs.Launcher
import dev.tpcomm.mpi.jobs.MpiJobs
import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.doubles.shouldBeLessThan
import io.kotest.matchers.shouldBe
import java.nio.file.Files

/**
 * The data-parallel example as 2 MPI processes (comm-mpi's job launcher), on Open MPI and MPICH:
 * both ranks end with the same weights, within the tolerance of [DataParallelTrainingTest] of
 * single-process training. A missing implementation fails unless `TPCOMM_ALLOW_MISSING_MPI=1`.
 */
class DataParallelMpiTest : FunSpec({
    val reference by lazy { DataParallelMlp.trainSingleProcess() }
    // The ranks find DJL's native library where this JVM unpacked it, and never download.
    val env = mapOf("DJL_OFFLINE" to "true") + (System.getenv("DJL_CACHE_DIR")?.let { mapOf("DJL_CACHE_DIR" to it) } ?: emptyMap())

    for (launcher in Launcher.entries) {
        test("2 ranks under ${launcher.command} train the same model as one process").config(enabled = launcher.path != null || !MpiJobs.allowMissing) {
            checkNotNull(launcher.path) {
                "${launcher.command} is not on PATH: install ${launcher.packages} (scripts/test.sh does), or set TPCOMM_ALLOW_MISSING_MPI=1 to skip"
            }
            // First, in this JVM: it also unpacks DJL's native library, so the ranks find it there.
            val expected = reference
            val dir = Files.createTempDirectory("tpcomm-djl-mpi")
            try {
                val job = MpiJobs.runMpi(launcher, 2, DataParallelMpiMain::class.java.name, listOf(dir.toString()), limitSeconds = 180, env = env)
                withClue(job.toString()) {
                    job.timedOut shouldBe false
                    job.exitCode shouldBe 0
                }
                val perRank = (0 until 2).map { DataParallelMpiMain.read(dir.resolve("rank-$it.bin")) }
                equalBits(perRank[0], perRank[1]) shouldBe true
                val error = maxRelativeError(perRank[0], expected)
                println("data parallel, 2 ranks under ${launcher.command}: max |w - w_single| / max |w_single| = $error (${job.elapsedMillis} ms)")
                error shouldBeLessThan 1e-6
            } finally {
                dir.toFile().deleteRecursively()
            }
        }
    }
})
