package dev.tpcomm.mpi.jobs

import dev.tpcomm.mpi.MpiCommunicator
import kotlinx.coroutines.runBlocking
import java.nio.file.Path
import kotlin.system.exitProcess

/**
 * The cases of a job main that each run on a duplicate of [world], so a case that breaks its
 * communicator (a mismatch aborts it) leaves the world usable for the next; their outcomes are
 * kept in order for [CaseReports].
 */
class DuplicateCases(private val world: MpiCommunicator) {
    /** Each case's outcome, in the order the cases ran. */
    val outcomes: MutableList<CaseOutcome> = ArrayList()

    /** Runs [body] on a fresh duplicate of the world, closed afterwards; a throw is the case's failure. */
    suspend fun case(name: String, body: suspend (MpiCommunicator) -> Unit) {
        val comm = world.duplicate() as MpiCommunicator
        outcomes += try {
            body(comm)
            CaseOutcome(name, "Passed", "")
        } catch (e: Throwable) {
            CaseOutcome(name, "Failed", "${e.javaClass.name}: ${e.message}")
        } finally {
            comm.close()
        }
    }

    companion object {
        /**
         * A job main's whole run, one rank: [create]s the world (left open: the library finalizes MPI
         * at exit), runs [cases] with it (each [case] on a duplicate), writes this rank's outcomes to
         * the file `args[0]` ([CaseReports]) and exits 0. A throw outside a case (the creation's) ends
         * the JVM with it, and no report.
         */
        fun runJob(args: Array<String>, create: suspend () -> MpiCommunicator, cases: suspend DuplicateCases.(world: MpiCommunicator) -> Unit): Nothing {
            val out = Path.of(args[0])
            val (rank, outcomes) = runBlocking {
                val world = create()
                val runner = DuplicateCases(world)
                runner.cases(world)
                world.rank to runner.outcomes
            }
            CaseReports.write(out, rank, outcomes)
            exitProcess(0)
        }
    }
}
