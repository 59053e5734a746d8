package dev.tpcomm.mpi.jobs

/**
 * Prints [line] for the job's test to read, flushed at once: a rank may be ended by `MPI_Abort` or
 * a signal right after, and what it printed must still reach the launcher's output.
 */
internal fun say(line: String) {
    System.out.println(line)
    System.out.flush()
}
