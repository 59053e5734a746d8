package dev.tpcomm.mpi

import dev.tpcomm.DType
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

/**
 * The abort-notice protocol of one [MpiCommunicator]: when the communicator breaks, it sends one
 * tiny message (tag [ABORT_TAG]) to every other rank on a private duplicate communicator
 * ([controlHandle]); each rank keeps one receive posted there and tests it before and while its
 * operations run, so a peer's failure ends its pending and later calls (in `NonBlocking` mode)
 * instead of letting them complete with operations the broken rank abandoned.
 *
 * Every method runs on the communicator's thread. The buffers live in [arena], which the
 * communicator pins for the life of the process once it broke (MPI may still hold the requests).
 */
internal class MpiAbortNotices(
    private val binding: MpiBinding,
    private val controlHandle: Long,
    private val rank: Int,
    private val worldSize: Int,
    arena: Arena,
) {
    private val abi: MpiAbi = binding.abi
    private val scratch: MemorySegment = arena.allocate(128L, 64)
    private val requests: MemorySegment = arena.allocate(8L * worldSize, 8)
    private val request: MemorySegment = arena.allocate(8L, 8)
    private val buffer: MemorySegment = arena.allocate(8L, 8)
    private val payload: MemorySegment = arena.allocate(8L, 8) // the content is irrelevant
    @Volatile private var sent = false

    /** Whether the notice receive was posted (then it must be cancelled before the communicator is freed). */
    var receivePosted: Boolean = false
        private set

    /**
     * Tells every other rank that this communicator broke, and drives the sends for at most
     * [PUSH_NANOS] (some transports only move data inside MPI calls). Once only.
     */
    fun send() {
        if (sent) return
        sent = true
        var slot = 0L
        for (peer in 0 until worldSize) {
            if (peer == rank) continue
            binding.isend(payload.address(), 1, abi.datatype(DType.Int32), peer, ABORT_TAG, controlHandle, requests.address() + slot)
            slot += 8
        }
        val until = System.nanoTime() + PUSH_NANOS
        val flag = scratch.address() + OFF_FLAG
        var pending = slot / 8
        var i = 0L
        while (pending > 0 && System.nanoTime() - until < 0) {
            val offset = (i % (slot / 8)) * 8
            if (abi.readHandle(requests, offset) != abi.requestNull) {
                binding.test(requests.address() + offset, flag, abi.statusIgnore)
                if (scratch.get(ValueLayout.JAVA_INT, OFF_FLAG) != 0) pending--
            }
            i++
        }
    }

    /**
     * Posts the one notice receive (on first use). A receive posted once is matched by any progress
     * MPI makes, unlike `MPI_Iprobe`, which MPICH answers from its unexpected queue before pulling
     * new messages in. Returns MPI's error code.
     */
    fun postReceive(): Int {
        receivePosted = true
        return binding.irecv(buffer.address(), 1, abi.datatype(DType.Int32), abi.anySource, ABORT_TAG, controlHandle, request.address())
    }

    /** The rank whose notice arrived, or -1 when none did (the receive must be posted). */
    fun arrived(): Int {
        val flag = scratch.address() + OFF_FLAG
        if (binding.test(request.address(), flag, scratch.address() + OFF_STATUS) != 0) return -1
        if (scratch.get(ValueLayout.JAVA_INT, OFF_FLAG) == 0) return -1
        return abi.statusLayout.parse(scratch.asSlice(OFF_STATUS, abi.statusLayout.size)).source
    }

    /** Cancels the posted receive and waits (at most [PUSH_NANOS]) until MPI lets go of it. */
    fun cancelReceive() {
        binding.cancel(request.address())
        val until = System.nanoTime() + PUSH_NANOS
        val flag = scratch.address() + OFF_FLAG
        while (System.nanoTime() - until < 0) {
            if (binding.test(request.address(), flag, abi.statusIgnore) != 0) return
            if (scratch.get(ValueLayout.JAVA_INT, OFF_FLAG) != 0) return
        }
    }

    companion object {
        /** The tag of notices on the control communicator. */
        const val ABORT_TAG: Int = 7

        /** How long [send] and [cancelReceive] drive MPI at most. */
        const val PUSH_NANOS: Long = 200_000_000
        private const val OFF_FLAG: Long = 0
        private const val OFF_STATUS: Long = 64
    }
}
