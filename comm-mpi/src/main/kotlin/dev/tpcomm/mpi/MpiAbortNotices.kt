package dev.tpcomm.mpi

import dev.tpcomm.DType
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.util.concurrent.locks.ReentrantLock
import kotlin.concurrent.withLock

/**
 * The abort-notice protocol of one [MpiCommunicator]: when the communicator breaks, it sends one
 * tiny message (tag [ABORT_TAG], carrying a [reason] code) to every other rank on a private
 * duplicate communicator ([controlHandle]); each rank keeps one receive posted there and tests it
 * before and while its operations run, so a peer's failure ends its pending and later calls
 * instead of letting them complete with operations the broken rank abandoned.
 *
 * Under `MPI_THREAD_MULTIPLE` the deadline watchdog also tests the receive ([pollFromOtherThread])
 * while the communicator's thread is blocked in a collective or idle, so a rank blocked in a
 * blocking collective, or busy outside MPI, learns of a peer's failure within one watchdog period
 * (issue 20: a failing rank ends the job promptly, and every rank dumps its flight recorder before
 * the job is aborted). Every method takes one lock, so two threads never touch the same request;
 * below `MPI_THREAD_MULTIPLE` only the communicator's thread calls them. The buffers live in
 * [arena], which the communicator pins for the life of the process once it broke (MPI may still
 * hold the requests). [send] runs through [whileMpiOpen] (the runtime's [MpiRuntime.whileMpiOpen]):
 * a notice is never sent once `MPI_Finalize` began.
 */
internal class MpiAbortNotices(
    private val binding: MpiBinding,
    private val controlHandle: Long,
    private val rank: Int,
    private val worldSize: Int,
    arena: Arena,
    private val whileMpiOpen: (() -> Unit) -> Boolean = { it(); true },
) {
    private val abi: MpiAbi = binding.abi
    private val lock = ReentrantLock()
    private val scratch: MemorySegment = arena.allocate(128L, 64)
    private val sendFlag: MemorySegment = arena.allocate(8L, 8)
    private val requests: MemorySegment = arena.allocate(8L * worldSize, 8)
    private val request: MemorySegment = arena.allocate(8L, 8)
    private val buffer: MemorySegment = arena.allocate(8L, 8)
    private val payload: MemorySegment = arena.allocate(8L, 8)
    @Volatile private var sent = false

    /** Whether the notice receive was posted (then it must be cancelled before the communicator is freed). */
    @Volatile var receivePosted: Boolean = false
        private set

    /** The rank whose notice arrived, once one did (the receive completes once); -1 before. */
    @Volatile private var from: Int = -1

    /** The [reason] code the arrived notice carried ([REASON_FAILED] before one arrived). */
    @Volatile var reason: Int = REASON_FAILED
        private set

    /**
     * Tells every other rank that this communicator broke, with [reason] ([REASON_FAILED],
     * [REASON_PROGRAM_FAILED] or [REASON_TIMEOUT]), and drives the sends for at most [PUSH_NANOS] (some transports only
     * move data inside MPI calls). Once only; nothing once `MPI_Finalize` began (the peers are
     * then told by the end of this process, which the launcher reports).
     */
    fun send(reason: Int = REASON_FAILED) {
        whileMpiOpen { sendLocked(reason) }
    }

    private fun sendLocked(reason: Int) = lock.withLock {
        if (sent) return
        sent = true
        payload.set(ValueLayout.JAVA_INT, 0, reason)
        var slot = 0L
        for (peer in 0 until worldSize) {
            if (peer == rank) continue
            binding.isend(payload.address(), 1, abi.datatype(DType.Int32), peer, ABORT_TAG, controlHandle, requests.address() + slot)
            slot += 8
        }
        val until = System.nanoTime() + PUSH_NANOS
        val flag = sendFlag.address()
        var pending = slot / 8
        var i = 0L
        while (pending > 0 && System.nanoTime() - until < 0) {
            val offset = (i % (slot / 8)) * 8
            if (abi.readHandle(requests, offset) != abi.requestNull) {
                binding.test(requests.address() + offset, flag, abi.statusIgnore)
                if (sendFlag.get(ValueLayout.JAVA_INT, 0) != 0) pending--
            }
            i++
        }
    }

    /**
     * Posts the one notice receive (on first use). A receive posted once is matched by any progress
     * MPI makes, unlike `MPI_Iprobe`, which MPICH answers from its unexpected queue before pulling
     * new messages in. Returns MPI's error code.
     */
    fun postReceive(): Int = lock.withLock {
        if (receivePosted || retired) return 0
        receivePosted = true
        binding.irecv(buffer.address(), 1, abi.datatype(DType.Int32), abi.anySource, ABORT_TAG, controlHandle, request.address())
    }

    /** The rank whose notice arrived, or -1 when none did (the receive must be posted). */
    fun arrived(): Int = lock.withLock { testLocked() }

    /**
     * [arrived] for a thread other than the communicator's (`MPI_THREAD_MULTIPLE` only): posts the
     * receive if needed, and gives up at once (-1) while the communicator's thread holds the lock.
     */
    fun pollFromOtherThread(): Int {
        if (from >= 0) return from
        if (!lock.tryLock()) return -1
        try {
            if (retired) return -1
            if (!receivePosted) {
                receivePosted = true
                if (binding.irecv(buffer.address(), 1, abi.datatype(DType.Int32), abi.anySource, ABORT_TAG, controlHandle, request.address()) != 0) return -1
            }
            return testLocked()
        } finally {
            lock.unlock()
        }
    }

    private fun testLocked(): Int {
        // Once completed, the request is MPI_REQUEST_NULL and MPI_Test would report an empty status.
        if (from >= 0) return from
        val flag = scratch.address() + OFF_FLAG
        if (binding.test(request.address(), flag, scratch.address() + OFF_STATUS) != 0) return -1
        if (scratch.get(ValueLayout.JAVA_INT, OFF_FLAG) == 0) return -1
        val source = abi.statusLayout.parse(scratch.asSlice(OFF_STATUS, abi.statusLayout.size)).source
        if (source < 0) return -1
        reason = buffer.get(ValueLayout.JAVA_INT, 0)
        from = source
        return source
    }

    /** Set by [retire]: the communicator is being freed; no receive is posted any more. */
    private var retired = false

    /**
     * Before the communicator is freed: no receive is posted from now on (by any thread), and a
     * posted one is cancelled ([cancelReceive]).
     */
    fun retire() = lock.withLock {
        retired = true
        if (receivePosted) cancelReceive()
    }

    /** Cancels the posted receive and waits (at most [PUSH_NANOS]) until MPI lets go of it. */
    fun cancelReceive() = lock.withLock {
        if (from >= 0) return
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

        /** A notice's reason: the communicator failed (timeout, mismatch, MPI error, cancellation). */
        const val REASON_FAILED: Int = 0

        /** A notice's reason: the sender's program failed (an exception escaped `main`, or it exited non-zero). */
        const val REASON_PROGRAM_FAILED: Int = 1

        /**
         * A notice's reason: the sender's call passed its deadline. The receivers' operations in
         * flight end with a timeout too, as every waiting rank's does on the in-process backend:
         * their own deadlines, up to a watchdog period apart, would otherwise race the notice.
         */
        const val REASON_TIMEOUT: Int = 2

        /** How long [send] and [cancelReceive] drive MPI at most. */
        const val PUSH_NANOS: Long = 200_000_000
        private const val OFF_FLAG: Long = 0
        private const val OFF_STATUS: Long = 64
    }
}
