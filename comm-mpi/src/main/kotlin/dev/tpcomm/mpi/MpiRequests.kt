package dev.tpcomm.mpi

import dev.tpcomm.coroutines.FlightRecorder
import java.util.ArrayDeque

/**
 * The non-blocking MPI operations of one communicator in flight ([MpiPending], polled by its
 * thread's progress loop): how many there are ([inFlightOps], for the shutdown), the receives
 * still probing in issue order ([probing]), and what a poll needs of the communicator
 * ([MpiPending.Context]).
 */
internal class MpiRequests(
    override val binding: MpiBinding,
    override val handle: Long,
    private val runtime: MpiRuntime,
    private val failures: MpiFailures,
    private val calls: MpiNativeCalls,
) : MpiPending.Context {
    override val abi: MpiAbi = binding.abi

    /** Non-blocking operations of this communicator in flight (changed on its thread only). */
    @Volatile var inFlightOps: Int = 0
        private set

    /**
     * Receives that still probe for their message, in issue order (MPI thread only). A receive
     * posts its `MPI_Irecv` only when no earlier one that could take the same message (same source
     * and tag, or a wildcard on either side) still probes, so receives match messages in the order
     * they were issued, as posted MPI receives do, whatever order the progress loop polls them in.
     */
    private val probing = ArrayDeque<MpiPending>()

    /** [p], a receive that probes first, was issued (MPI thread only). */
    fun probes(p: MpiPending) {
        probing.addLast(p)
    }

    override fun checkInFlight(operation: String, entry: FlightRecorder.Entry) {
        failures.ensureNotBrokenWhileInFlight(operation, entry)
        failures.checkAbortNotices(operation, entry, inFlight = true)
    }

    override fun check(rc: Int, operation: String, entry: FlightRecorder.Entry) = failures.check(rc, operation, entry)

    override fun waitsForEarlierReceive(p: MpiPending): Boolean {
        val mine = p.result ?: return false
        for (q in probing) {
            if (q === p) return false
            val other = q.result ?: continue
            if (mine.probeHandle != other.probeHandle) continue // another MPI communicator: they never take each other's messages
            val source = mine.probeSource == other.probeSource || mine.probeSource == abi.anySource || other.probeSource == abi.anySource
            val tag = mine.probeTag == other.probeTag || mine.probeTag == abi.anyTag || other.probeTag == abi.anyTag
            if (source && tag) return true
        }
        return false
    }

    override fun probed(p: MpiPending) {
        probing.remove(p)
    }

    override fun issued() {
        inFlightOps++
        runtime.inFlight.incrementAndGet()
    }

    override fun retired() {
        inFlightOps--
        runtime.inFlight.decrementAndGet()
    }

    override fun completed(operation: String, nanos: Long) = calls.recordProfile(operation, nanos)

    override fun keepForever(obj: Any) = runtime.pin(obj)
}
