package dev.tpcomm.mpi.jobs

import dev.tpcomm.mpi.duplicate

import dev.tpcomm.CommConfig
import dev.tpcomm.mpi.MpiBackendFactory
import dev.tpcomm.mpi.MpiCommunicator
import dev.tpcomm.mpi.MpiRuntime
import dev.tpcomm.mpi.MpiThreadLevel
import dev.tpcomm.mpi.MpiProgress
import dev.tpcomm.testkit.CaseResult
import dev.tpcomm.testkit.ConformanceOptions
import dev.tpcomm.testkit.ScratchCommunicatorFactory
import dev.tpcomm.testkit.SpmdConformanceRunner
import dev.tpcomm.testkit.writeJUnitXml
import kotlinx.coroutines.runBlocking
import java.nio.file.Files
import java.nio.file.Path
import kotlin.system.exitProcess
import kotlin.time.Duration.Companion.seconds

/**
 * One rank of a conformance job: `mpirun -np N java ... MpiConformanceMain <outDir> <suiteName>`.
 * Runs comm-testkit's SPMD runner on the MPI backend (consistency checks on; failure cases on
 * duplicates with `abortOnTimeout = false`), writes `rank-<r>.tsv` (case, status, base64 message)
 * and a JUnit XML per rank into outDir, and exits 0 (results are judged by [MpiJobsTest]).
 */
object MpiConformanceMain {
    /**
     * Cases to leave out (`-Dtpcomm.mpi.excludeCases=name|name`), for diagnosing a job; none by
     * default. `-Dtpcomm.mpi.onlyCases=name|name` (or the environment variable `TPCOMM_MPI_ONLY_CASES`,
     * which the launchers pass to the ranks) runs only the named cases.
     */
    val EXCLUDED: Set<String> = (System.getProperty("tpcomm.mpi.excludeCases") ?: "")
        .split('|').map { it.trim() }.filter { it.isNotEmpty() }.toSet()

    /**
     * `-Dtpcomm.mpi.collectiveOnly=true` leaves out the failure-mode cases (which abort scratch
     * communicators on purpose). The MPICH run across hosts sets it: after a communicator of the
     * process was aborted, MPICH 4.0's `MPI_Finalize` across hosts may wait for the abandoned
     * operations (comm-mpi then exits after 10 s without finalizing and hydra reports 255).
     */
    val COLLECTIVE_ONLY: Boolean = System.getProperty("tpcomm.mpi.collectiveOnly") == "true"

    @JvmStatic
    fun main(args: Array<String>) {
        val out = Path.of(args[0])
        val suite = args.getOrElse(1) { "mpi" }
        val code = runBlocking {
            val base = CommConfig.fromEnvironment()
            val comm = MpiBackendFactory().create(base.copy(checkConsistency = true, timeout = 30.seconds)) as MpiCommunicator
            val level = System.getenv("TPCOMM_MPI_THREAD_LEVEL")?.let { MpiThreadLevel.valueOf(it) }
            if (level != null && level < MpiThreadLevel.Multiple) {
                // A job below MPI_THREAD_MULTIPLE: MPI must have granted the level, and communicators share one thread.
                val runtime = checkNotNull(MpiRuntime.current)
                check(runtime.providedThreadLevel == level.value && runtime.sharesOneThread) {
                    "asked for thread level $level (${level.value}), MPI provided ${runtime.providedThreadLevel}"
                }
                comm.duplicate().use { dup -> check(dup.nativeDispatcher === comm.nativeDispatcher) { "a duplicate got its own thread under $level" } }
            }
            val options = ConformanceOptions(maxWorldSize = comm.worldSize, worldSizes = listOf(comm.worldSize)).withSystemProperties()
            val scratch = ScratchCommunicatorFactory { parent, timeout ->
                val p = parent as MpiCommunicator
                // Through the extension users call on a plain Communicator (dev.tpcomm.mpi.duplicate).
                (parent as dev.tpcomm.Communicator).duplicate(p.config.copy(timeout = timeout), p.mpiConfig.copy(abortOnTimeout = false, progress = MpiProgress.NonBlocking))
            }
            val only = (System.getProperty("tpcomm.mpi.onlyCases") ?: System.getenv("TPCOMM_MPI_ONLY_CASES"))?.split('|')?.map { it.trim() }?.filter { it.isNotEmpty() }?.toSet()
            val filter: (dev.tpcomm.testkit.ConformanceCase) -> Boolean = {
                SpmdConformanceRunner.notSoak(it) && it.name !in EXCLUDED && (only == null || it.name in only) &&
                    !(COLLECTIVE_ONLY && it.kind == dev.tpcomm.testkit.CaseKind.Failure)
            }
            val results = SpmdConformanceRunner.run(comm, filter = filter, options = options, scratch = scratch, report = { r ->
                if (r.status == CaseResult.Status.Failed) System.err.println("FAILED ${r.case} on rank ${r.rank}: ${r.message}")
            })
            CaseReports.write(out, comm.rank, results.map { CaseOutcome(it.case, it.status.toString(), it.message ?: "") })
            writeJUnitXml(out.resolve("TEST-$suite.rank${comm.rank}.xml"), "$suite.rank${comm.rank}", results)
            comm.close()
            0
        }
        exitProcess(code)
    }
}
