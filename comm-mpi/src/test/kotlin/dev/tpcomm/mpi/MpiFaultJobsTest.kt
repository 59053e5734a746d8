package dev.tpcomm.mpi

import dev.tpcomm.mpi.jobs.JobResult
import dev.tpcomm.mpi.jobs.Launcher
import dev.tpcomm.mpi.jobs.MpiFaultMain
import dev.tpcomm.mpi.jobs.MpiJobs
import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldNotContain
import io.kotest.matchers.longs.shouldBeLessThanOrEqual
import io.kotest.matchers.shouldBe
import io.kotest.matchers.shouldNotBe
import io.kotest.matchers.string.shouldContain
import kotlin.time.Duration.Companion.minutes

/**
 * Real MPI jobs where a rank misbehaves the way training jobs do, on every installed
 * implementation ([MpiFaultMain] is the program of every rank; the last rank is the victim).
 *
 * The rule asserted: a healthy job completes with exit 0 on every rank, however far apart the
 * ranks finish within the timeout; a failed job exits non-zero, every rank exits non-zero or is
 * killed by the launcher (never 0), no rank is left running, the job ends within the timeout plus
 * 5 s after the fault, and the survivors name the exception (for `kill -9`, the launcher ends the
 * survivors at once and reports the dead rank). Each job prints one summary line (exit codes,
 * wall time, fault-to-end time) to the test's stdout.
 */
class MpiFaultJobsTest : FunSpec({
    val timeout = 5

    /** A job that must complete. */
    class Healthy(val mode: String, val np: Int, val timeoutSeconds: Int, val extra: List<String>, val expect: List<String>)

    /**
     * A job that must fail: [survivorsSay] (and each of [alsoSay]) is a pattern the job's output must contain. The
     * communicators' timeout is [timeoutSeconds]; the job must end within [deadlineSeconds] plus 5 s after the fault.
     */
    class Fault(
        val mode: String,
        val label: String,
        val survivorsSay: String,
        val np: Int = 3,
        val alsoSay: List<String> = emptyList(),
        val timeoutSeconds: Int = timeout,
        val deadlineSeconds: Int = timeoutSeconds,
    )

    val healthy = listOf(
        // (e) rank 0 finishes and closes while the others compute 12 s (more than the old fixed
        // 10 s finalize wait), within a 20 s timeout.
        Healthy("apart", 3, 20, listOf("12"), listOf("DONE rank 0", "DONE rank 1", "DONE rank 2")),
        // Issue 11 item 4: a receive into a buffer of the wrong size.
        Healthy("recvsize", 2, timeout, emptyList(), listOf("CAUGHT rank 1 dev.tpcomm.CommunicationException", "has 64 bytes but the receiving tensor (Float32[8]) has 32 bytes", "RECEIVED rank 1 16 floats")),
        // Issue 11 item 5: send 16 MiB to self, then receive it.
        Healthy("selfsend", 2, timeout, emptyList(), listOf("RECEIVED rank 0 16 MiB from itself", "RECEIVED rank 1 16 MiB from itself")),
        // Issue 35: a rank 10 s late to Comm.create, past the 5 s operation timeout, joins within the
        // default creation deadline (CommConfig.creationTimeout, 5 minutes).
        Healthy("latejoin", 3, timeout, emptyList(), listOf("DONE rank 0", "DONE rank 1", "DONE rank 2")),
    )
    val timeoutName = "tpcomm-mpi: rank [01]: dev\\.tpcomm\\.CommunicationTimeoutException"
    val rank0TimedOut = "tpcomm-mpi: rank 0: dev\\.tpcomm\\.CommunicationTimeoutException"
    val faults = listOf(
        Fault("early", "(a) returns from main early", timeoutName),
        Fault("exit", "(b) calls System.exit(0) between collectives", timeoutName),
        Fault("exitduring", "(b) calls System.exit(0) while in a collective", "tpcomm-mpi: rank 2: dev\\.tpcomm\\.CommunicatorAbortedException"),
        Fault("kill9", "(c) is killed with kill -9", "(Exit code: +137|signal 9|EXIT CODE: 9)"),
        Fault("stuck", "(d) is stuck in computation", timeoutName),
        // Issue 20 item 3: the exception escapes main; the survivors learn it from the victim's notice.
        Fault("throw", "(f) throws inside a collective", "tpcomm-mpi: rank [01]: dev\\.tpcomm\\.CommunicatorAbortedException: .*rank 2 failed"),
        // With the creation deadline set to the operation timeout (the default is 5 minutes: latejoin).
        Fault("late", "(g) is 30 s late to Comm.create, creationTimeout 5 s", timeoutName),
        // On 2 ranks MPICH 4.0's MPI_Abort spun forever while the stuck peer made no MPI call
        // (issue 11 item 2), and an early-returning peer exited 0 (item 3).
        Fault("stuck", "(d) is stuck in computation", rank0TimedOut, np = 2),
        Fault("early", "(a) returns from main early", rank0TimedOut, np = 2),
        // Issue 22 item 4: rank 0's monitoredBarrier names the late rank, and tells rank 1, which arrived.
        Fault(
            "monbar", "(h) sleeps past a monitoredBarrier's timeout",
            "CAUGHT rank 0 dev\\.tpcomm\\.MonitoredBarrierException: [^\\n]*rank 2 did not reach monitoredBarrier within 2s",
            alsoSay = listOf("CAUGHT rank 1 dev\\.tpcomm\\.MonitoredBarrierException: [^\\n]*rank 2 did not reach monitoredBarrier within 2s \\(reported by rank 0\\)"),
            // A long communicator timeout (MPI's start-up under load), but the barrier's 2 s decide the deadline.
            timeoutSeconds = 30, deadlineSeconds = 2,
        ),
    )

    fun summary(launcher: Launcher, mode: String, job: JobResult, faultToEnd: Long?) {
        println(
            "fault-matrix ${launcher.id} $mode: job exit ${job.exitCode}, ranks ${job.rankOutcomes}, wall ${job.elapsedMillis} ms" +
                (faultToEnd?.let { ", fault to end $it ms" } ?: ""),
        )
    }

    for (launcher in Launcher.entries) {
        if (launcher.path == null) {
            test("faults.${launcher.id}: ${launcher.command} installed").config(enabled = !MpiJobs.allowMissing) {
                error("${launcher.command} is not on PATH: install ${launcher.packages}, or set TPCOMM_ALLOW_MISSING_MPI=1 to skip")
            }
            continue
        }
        for (h in healthy) {
            test("faults.${launcher.id}.np${h.np} ${h.mode}: completes with exit 0 on every rank").config(timeout = 3.minutes) {
                val job = MpiJobs.runMpiPerRank(launcher, h.np, MpiFaultMain::class.java.name, listOf(h.mode, "${h.timeoutSeconds}") + h.extra, limitSeconds = 120)
                summary(launcher, h.mode, job, null)
                withClue(job.toString()) {
                    job.timedOut shouldBe false
                    job.exitCode shouldBe 0
                    job.rankExitCodes shouldBe List(h.np) { 0 }
                    for (line in h.expect) job.stdout shouldContain line
                    job.stdout.contains("WRONG") shouldBe false
                    job.leftovers shouldBe 0
                }
            }
        }
        for (f in faults) {
            test("faults.${launcher.id}.np${f.np} ${f.mode}: one rank ${f.label}: every rank exits non-zero within ${if (f.deadlineSeconds == f.timeoutSeconds) "the timeout" else "${f.deadlineSeconds} s"} plus 5 s").config(timeout = 3.minutes) {
                val job = MpiJobs.runMpiPerRank(launcher, f.np, MpiFaultMain::class.java.name, listOf(f.mode, "${f.timeoutSeconds}"), limitSeconds = 120)
                val fault = Regex("^FAULT (\\d+)$", RegexOption.MULTILINE).findAll(job.stdout).map { it.groupValues[1].toLong() }.minOrNull()
                val faultToEnd = fault?.let { job.endEpochMillis - it }
                summary(launcher, "np${f.np} ${f.mode}", job, faultToEnd)
                withClue(job.toString()) {
                    job.timedOut shouldBe false
                    job.exitCode shouldNotBe 0
                    job.rankExitCodes shouldNotContain 0
                    job.leftovers shouldBe 0
                    fault shouldNotBe null
                    faultToEnd!! shouldBeLessThanOrEqual (f.deadlineSeconds + 5) * 1000L
                    Regex(f.survivorsSay).containsMatchIn(job.stdout + job.stderr) shouldBe true
                    for (line in f.alsoSay) withClue(line) { Regex(line).containsMatchIn(job.stdout + job.stderr) shouldBe true }
                    job.stdout.contains("WRONG") shouldBe false
                }
            }
        }
    }
})
