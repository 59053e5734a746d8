package dev.tpcomm.mpi

import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.engine.NativeRequest
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

// The request engine of an MPI communicator: non-blocking MPI operations (MPI_I* collectives,
// MPI_Isend/MPI_Irecv, probes) as [NativeRequest]s polled by the communicator's NativeDispatcher.

/** A status read back from MPI (source, tag, size). */
internal class MpiStatusResult {
    var source: Int = -1
    var tag: Int = -1
    var byteCount: Long = 0
    var probeSource: Int = 0
    var probeTag: Int = 0

    /** The MPI communicator probed and received on: the user's (null) or the private control duplicate (the monitored barrier's). */
    var probeHandle: Long? = null

    /** The size of a probed message refused by a receive of another size; -1 when none was refused. */
    var refusedBytes: Long = -1
}

/** One non-blocking operation in flight, polled by the dispatcher's progress loop; knows its communicator only as a [Context]. */
internal class MpiPending(
    private val comm: Context,
    val entry: FlightRecorder.Entry,
    val operation: String,
    var kind: Kind,
    val keepAlive: Any?,
) : NativeRequest {
    /** For a receive that probes first: posts the receive of the probed message (request, source, tag). */
    var receive: ((Long, Int, Int) -> Int)? = null

    /** The message size that [receive] accepts. */
    var expectedBytes: Long = -1

    /** The front's tensors handed over for this operation: let go when it completes (never when it fails: MPI may still touch them). */
    var handOff: MpiHandOff? = null

    enum class Kind { Request, Probe }

    /** What a poll needs of its communicator ([MpiRequests]). */
    interface Context {
        val binding: MpiBinding
        val abi: MpiAbi

        /** The MPI communicator receives and probes go to by default. */
        val handle: Long

        /** Throws when the communicator broke while [operation] was in flight, or a peer's notice ended it. */
        fun checkInFlight(operation: String, entry: FlightRecorder.Entry)

        /** Maps an MPI error code to the named exception (and breaks the communicator). */
        fun check(rc: Int, operation: String, entry: FlightRecorder.Entry)

        /** Whether an earlier receive still probing could take the message [p] would probe. */
        fun waitsForEarlierReceive(p: MpiPending): Boolean

        /** [p] stopped probing (it found its message, or failed). */
        fun probed(p: MpiPending)

        /** An operation was issued / retired: the communicator's and the process's in-flight counts. */
        fun issued()
        fun retired()

        /** [operation] completed after [nanos] (the profile). */
        fun completed(operation: String, nanos: Long)

        /** Keeps [obj] (memory MPI may still touch) reachable for the life of the process. */
        fun keepForever(obj: Any)
    }

    // Own native memory: several operations may be in flight at once. Freed by the GC only
    // after the operation completed (the dispatcher keeps this object until then, and a failed
    // operation is pinned for the life of the process).
    val memory: MemorySegment = Arena.ofAuto().allocate(128L, 64)
    val request: Long = memory.address()
    val flag: Long = memory.address() + 16
    val status: Long = memory.address() + 32
    var mainPending = false
    var result: MpiStatusResult? = null
    private val startNanos = System.nanoTime()
    private var counted = false

    fun issued() {
        counted = true
        comm.issued()
    }

    private fun retire() {
        if (counted) {
            counted = false
            comm.retired()
        }
    }

    override fun poll(): Boolean {
        val b = comm.binding
        try {
            comm.checkInFlight(operation, entry)
            when (kind) {
                Kind.Request -> comm.check(b.test(request, flag, if (result != null) status else comm.abi.statusIgnore), operation, entry)
                Kind.Probe -> {
                    val r = result!!
                    val post = receive
                    // Receives match in the order they were issued: one waits while an earlier receive
                    // that could take the same message still probes (the progress loop's order is not
                    // the issue order: each caller hops onto this thread on its own).
                    if (post != null && comm.waitsForEarlierReceive(this)) return false
                    comm.check(b.iprobe(r.probeSource, r.probeTag, r.probeHandle ?: comm.handle, flag, status), operation, entry)
                    if (post != null && memory.get(ValueLayout.JAVA_INT, 16) != 0) {
                        comm.probed(this)
                        val s = comm.abi.statusLayout.parse(memory.asSlice(32, comm.abi.statusLayout.size))
                        if (s.byteCount != expectedBytes) {
                            r.source = s.source; r.tag = s.tag; r.byteCount = s.byteCount; r.refusedBytes = s.byteCount
                            mainPending = false
                            retire()
                            handOff?.mpiDone()
                            return true
                        }
                        // The probed message has the tensor's size: receive exactly it.
                        memory.set(ValueLayout.JAVA_INT, 16, 0)
                        kind = Kind.Request
                        comm.check(post(request, s.source, s.tag), operation, entry)
                        return false
                    }
                }
            }
            if (memory.get(ValueLayout.JAVA_INT, 16) != 0) {
                mainPending = false
                result?.let { r ->
                    val s = comm.abi.statusLayout.parse(memory.asSlice(32, comm.abi.statusLayout.size))
                    r.source = s.source; r.tag = s.tag; r.byteCount = s.byteCount
                }
                retire()
                handOff?.mpiDone()
                comm.completed(operation, System.nanoTime() - startNanos)
                return true
            }
            return false
        } catch (t: Throwable) {
            comm.probed(this)
            // MPI may still use this operation's buffers: keep them for the life of the process.
            comm.keepForever(this)
            throw t
        }
    }
}
