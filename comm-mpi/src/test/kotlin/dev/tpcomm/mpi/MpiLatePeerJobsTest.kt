package dev.tpcomm.mpi

import dev.tpcomm.mpi.jobs.Launcher
import dev.tpcomm.mpi.jobs.MpiJobs
import dev.tpcomm.mpi.jobs.MpiLatePeerMain
import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.ints.shouldBeLessThanOrEqual
import io.kotest.matchers.shouldBe
import io.kotest.matchers.shouldNotBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.string.shouldNotContain
import kotlin.time.Duration.Companion.minutes

/**
 * Issue 32 findings 4 and 5, on every installed implementation ([MpiLatePeerMain], 3 ranks): ranks
 * 0 and 1 give up on a split communicator's all-reduce with `awaitAll(timeout = 2 s)` while rank 2
 * is 6 s late. Ranks 0 and 1 get [dev.tpcomm.CommunicationTimeoutException]; rank 2's call returns
 * the full sum (1 + 2 + 3), and its next call on that communicator must fail with
 * [dev.tpcomm.CommunicatorAbortedException] within 10 s (the communicators' timeout is 30 s): before
 * the fix it blocked in the consistency check's `MPI_Allgather` until the timeout (finding 4).
 * Then every rank exits with the sub-communicator unclosed: no JVM may crash in the teardown
 * (finding 5: an abort notice sent after `MPI_Finalize` crashed MPICH's transport), and every
 * rank's program ends with exit 0 (it caught what it was told).
 */
class MpiLatePeerJobsTest : FunSpec({
    val timeoutSeconds = 30
    val nextWithinMillis = 10_000

    for (launcher in Launcher.entries) {
        if (launcher.path == null) {
            test("latepeer.${launcher.id}: ${launcher.command} installed").config(enabled = !MpiJobs.allowMissing) {
                error("${launcher.command} is not on PATH: install ${launcher.packages}, or set TPCOMM_ALLOW_MISSING_MPI=1 to skip")
            }
            continue
        }
        test("latepeer.${launcher.id}: after a caller's timeout aborts a split communicator, the late rank's next call fails within 10 s and no rank crashes").config(timeout = 2.minutes) {
            val job = MpiJobs.runMpiPerRank(launcher, 3, MpiLatePeerMain::class.java.name, listOf("$timeoutSeconds", "6"), limitSeconds = 90)
            val next = Regex("^NEXT rank 2 CAUGHT (\\S+) after (\\d+) ms", RegexOption.MULTILINE).find(job.stdout)
            println("latepeer ${launcher.id}: job exit ${job.exitCode}, ranks ${job.rankOutcomes}, wall ${job.elapsedMillis} ms, rank 2's next call: ${next?.value}")
            withClue(job.toString()) {
                job.timedOut shouldBe false
                for (r in 0..1) job.stdout shouldContain "FIRST rank $r CAUGHT dev.tpcomm.CommunicationTimeoutException"
                job.stdout shouldContain "FIRST rank 2 ok 6.0"
                next shouldNotBe null
                next!!.groupValues[1] shouldBe "dev.tpcomm.CommunicatorAbortedException"
                next.groupValues[2].toInt() shouldBeLessThanOrEqual nextWithinMillis
                for (r in 0..1) job.stdout shouldContain "NEXT rank $r CAUGHT dev.tpcomm.CommunicatorAbortedException"
                for (r in 0..2) job.stdout shouldContain "DONE rank $r"
                (job.stdout + job.stderr) shouldNotContain "A fatal error has been detected by the Java Runtime Environment"
                job.rankExitCodes shouldBe listOf(0, 0, 0)
                job.leftovers shouldBe 0
            }
        }
    }
})
