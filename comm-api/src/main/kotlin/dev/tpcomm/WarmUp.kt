package dev.tpcomm

import kotlin.time.Duration

/**
 * [CommConfig.warmUp]'s loop, written once for every way a communicator is made (`Comm.create`,
 * `runLocalWorld`): 8-byte float32 `Sum` all-reduces of a host tensor, one after the other, until a
 * rank's time is up. Each call's input on a rank is `1` while that rank is within its time, else `0`,
 * so each call's sum tells every rank, at once and identically, whether all are still within theirs:
 * the loop ends on every rank after the same call, whatever the ranks' clocks or start times.
 */
@InternalTpcommApi
public object WarmUp {
    /**
     * Warms [comm] for about [duration] (nothing when it is not positive) and returns how many
     * all-reduces it made, the same number on every rank. Collective: every rank of [comm] must call
     * it with a positive [duration] (their durations may differ; the shortest ends it).
     *
     * Cancellation and failure are those of the all-reduces it makes: a cancelled or failed call
     * ends the loop with that call's exception, the communicator's state being the call's outcome
     * (an abort on a timeout, for one).
     *
     * @throws IllegalArgumentException when [comm]'s collectives take no host tensor (NCCL, RCCL),
     * thrown by the first call on every rank, saying to leave [CommConfig.warmUp] at zero.
     */
    public suspend fun run(comm: Communicator, duration: Duration): Int {
        if (!duration.isPositive()) return 0
        val budget = duration.inWholeNanoseconds
        val flag = Tensor.zeros(DType.Float32, 2)
        try {
            val start = System.nanoTime()
            var calls = 0
            while (true) {
                flag.setFloat(0, if (System.nanoTime() - start < budget) 1f else 0f)
                flag.setFloat(1, 0f)
                try {
                    comm.allReduce(flag)
                } catch (e: IllegalArgumentException) {
                    if (calls > 0) throw e
                    throw IllegalArgumentException(
                        "CommConfig.warmUp: the warm-up all-reduces an 8-byte host tensor, which this communicator does not take " +
                            "(${e.message}); leave warmUp at zero (TPCOMM_WARM_UP_SECONDS unset or 0) on this backend",
                        e,
                    )
                }
                calls++
                if (flag.getFloat(0) < comm.worldSize) return calls
            }
        } finally {
            flag.close()
        }
    }
}
