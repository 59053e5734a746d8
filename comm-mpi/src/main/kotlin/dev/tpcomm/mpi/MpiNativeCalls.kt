package dev.tpcomm.mpi

import dev.tpcomm.coroutines.FlightRecorder
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.lang.ref.Reference
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicLong

/**
 * One MPI communicator's blocking MPI calls: [runBlockingCall] marks what this rank is blocked in
 * while the call runs (read by the peers' notices, [MpiFailures.peerAborted], and the shutdown
 * message), times it when [profiling], and maps its error code ([MpiFailures.check]). Also the
 * communicator's [scratch] words for single MPI results (a handle, a request, a flag) and the
 * per-operation [profile].
 */
internal class MpiNativeCalls(
    val failures: MpiFailures,
    arena: Arena,
    /** [MpiConfig.profiling]: each MPI call is timed into [profile]. */
    val profiling: Boolean,
) {
    /** Words for one MPI result at a time, on the communicator's thread: [OFF_HANDLE], [OFF_REQUEST], [OFF_FLAG]. */
    val scratch: MemorySegment = arena.allocate(SCRATCH_BYTES, 64)

    /** [scratch]'s address. */
    val scratchAddress: Long = scratch.address()

    private val stats = ConcurrentHashMap<String, MpiOpProfile.Accumulator>()

    // Written by the communicator's thread around each blocking call, read by the notice thread and
    // the shutdown message (is this rank blocked in MPI, and in what). The sequence and operation
    // are plain fields published by the release store of the call token, so the fast path pays
    // neither a full fence nor a clock read.
    private val activeCallCell = AtomicLong(0L)
    private var callTokens: Long = 0L // native thread only
    private var currentSequence: Long = 0L
    private var currentOperation: String = ""

    /** The operation this rank is blocked in inside MPI now, or null. Any thread. */
    fun blockedIn(): String? = if (activeCallCell.get() != 0L) currentOperation else null

    /** The sequence number of [blockedIn]'s operation (meaningful while it is not null). */
    fun blockedSequence(): Long = currentSequence

    /** Runs one blocking MPI call (its deadline is the front's: [MpiFailures.deadlinePassed] aborts it from the watchdog's thread). */
    inline fun runBlockingCall(operation: String, entry: FlightRecorder.Entry, keepAlive: Any?, call: () -> Int) {
        val t0 = begin(operation, entry)
        val rc = try {
            call()
        } finally {
            end()
            Reference.reachabilityFence(keepAlive)
        }
        if (profiling) recordProfile(operation, System.nanoTime() - t0)
        failures.check(rc, operation, entry)
    }

    /** Marks the blocking call of [operation] begun; its start time when [profiling]. */
    fun begin(operation: String, entry: FlightRecorder.Entry): Long {
        currentOperation = operation
        currentSequence = entry.sequence
        val t0 = if (profiling) System.nanoTime() else 0L
        activeCallCell.lazySet(++callTokens)
        return t0
    }

    /** Marks the blocking call ended. */
    fun end() {
        activeCallCell.lazySet(0L)
    }

    /** Adds one call of [operation] that took [nanos] to [profile] (nothing unless [profiling]). */
    fun recordProfile(operation: String, nanos: Long) {
        if (!profiling) return
        stats.computeIfAbsent(operation) { MpiOpProfile.Accumulator() }.add(nanos)
    }

    /** See [MpiCommunicator.profile]. */
    fun profile(): Map<String, MpiOpProfile> = stats.mapValues { it.value.snapshot() }

    companion object {
        const val SCRATCH_BYTES: Long = 256
        const val OFF_HANDLE: Long = 0
        const val OFF_REQUEST: Long = 8
        const val OFF_FLAG: Long = 16
    }
}
