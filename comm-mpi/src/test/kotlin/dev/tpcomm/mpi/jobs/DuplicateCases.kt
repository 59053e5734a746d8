package dev.tpcomm.mpi.jobs

import dev.tpcomm.mpi.MpiCommunicator

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
}
