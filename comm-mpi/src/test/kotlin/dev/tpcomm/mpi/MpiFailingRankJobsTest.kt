package dev.tpcomm.mpi

import dev.tpcomm.mpi.jobs.Launcher
import dev.tpcomm.mpi.jobs.MpiJobs
import dev.tpcomm.mpi.jobs.MpiThrowingRankMain
import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldNotContain
import io.kotest.matchers.longs.shouldBeLessThanOrEqual
import io.kotest.matchers.shouldBe
import io.kotest.matchers.shouldNotBe
import kotlin.time.Duration.Companion.minutes

/**
 * Issue 20 item 3, as real jobs on every installed implementation: 3 ranks with the default
 * timeout (10 minutes), rank 1 throws from `main` after three all-reduces while the others wait in
 * a fourth. The job must end non-zero within 10 s of the throw (not at the timeout), no rank exits
 * 0, the exception is printed once, and the other ranks' exception names rank 1.
 */
class MpiFailingRankJobsTest : FunSpec({
    for (launcher in Launcher.entries) {
        if (launcher.path == null) {
            test("failing-rank.${launcher.id}: ${launcher.command} installed").config(enabled = !MpiJobs.allowMissing) {
                error("${launcher.command} is not on PATH: install ${launcher.packages}, or set TPCOMM_ALLOW_MISSING_MPI=1 to skip")
            }
            continue
        }
        test("failing-rank.${launcher.id}.np3: an exception escaping rank 1's main ends the job within 10 s (default timeout)").config(timeout = 3.minutes) {
            val job = MpiJobs.runMpiPerRank(launcher, 3, MpiThrowingRankMain::class.java.name, emptyList(), limitSeconds = 90)
            val fault = Regex("^FAULT (\\d+)$", RegexOption.MULTILINE).find(job.stdout)?.groupValues?.get(1)?.toLong()
            val faultToEnd = fault?.let { job.endEpochMillis - it }
            println("failing-rank ${launcher.id}: job exit ${job.exitCode}, ranks ${job.rankOutcomes}, wall ${job.elapsedMillis} ms, throw to end ${faultToEnd} ms")
            withClue(job.toString()) {
                job.timedOut shouldBe false
                job.exitCode shouldNotBe 0
                job.rankExitCodes shouldNotContain 0
                job.leftovers shouldBe 0
                fault shouldNotBe null
                faultToEnd!! shouldBeLessThanOrEqual 10_000L
                val all = job.stdout + job.stderr
                Regex("IllegalStateException: rank 1 fails on purpose").findAll(all).count() shouldBe 1
                // Each survivor names rank 1 (they are inside a blocking all-reduce when it fails).
                for (r in listOf(0, 2)) {
                    withClue("rank $r names rank 1") {
                        Regex("rank $r: dev\\.tpcomm\\.CommunicatorAbortedException: .*rank 1").containsMatchIn(all) shouldBe true
                    }
                }
            }
        }
    }
})
