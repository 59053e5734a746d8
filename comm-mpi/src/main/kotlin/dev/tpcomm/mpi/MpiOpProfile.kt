package dev.tpcomm.mpi

/**
 * Timing of one kind of operation on one communicator, collected when [MpiConfig.profiling] is on:
 * how many ran, and the total and longest native time in nanoseconds (blocking mode: the MPI call;
 * non-blocking mode: from issue to completion observed by `MPI_Test`). Immutable snapshot.
 *
 * @property count how many operations of this kind ran.
 * @property totalNanos their native time in total, in nanoseconds.
 * @property maxNanos the longest one's native time, in nanoseconds.
 */
public data class MpiOpProfile(
    public val count: Long,
    public val totalNanos: Long,
    public val maxNanos: Long,
) {
    /** Mean time per operation in microseconds (0 when none ran). */
    public val meanMicros: Double get() = if (count == 0L) 0.0 else totalNanos / 1000.0 / count

    internal class Accumulator {
        private var count = 0L
        private var total = 0L
        private var max = 0L

        @Synchronized fun add(nanos: Long) {
            count++; total += nanos; if (nanos > max) max = nanos
        }

        @Synchronized fun snapshot(): MpiOpProfile = MpiOpProfile(count, total, max)
    }
}
