package dev.tpcomm.mpi

import dev.tpcomm.engine.DeadlineWatchdog
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.locks.LockSupport

/**
 * The live MPI communicators of the process, for what concerns all of them: the thread that tests
 * their peers' abort notices, what they have in progress at shutdown, and the failure of the
 * program. Deadlines are not here: each communicator's front times its calls from the moment of
 * the call on the core's [DeadlineWatchdog] thread ([MpiCommunicator.deadlinePassed]). Thread-safe.
 */
internal class MpiCommunicators(private val periodMillis: Long = 50) : AutoCloseable {
    /** A communicator as the process sees it. */
    interface Member {
        /** The operation in progress (blocking call or non-blocking operations in flight), for messages; null when none. */
        fun describeActiveCall(): String?

        /**
         * Called on the notice thread every period: tests for a peer's abort notice when MPI allows
         * a second thread ([MpiAbortNotices.pollFromOtherThread]).
         */
        fun pollPeerNotices()

        /**
         * This process's program failed ([MpiRuntime.programFailed]): break the communicator and tell
         * its peers, naming [description]. Called on the failing thread, before `MPI_Abort`.
         */
        fun programFailed(description: String)

        /**
         * Waits until the communicator's thread has run what was queued on it so far (a blocking
         * call a released caller left inside MPI has returned, and the abort notices queued behind
         * it are sent), until [untilNanos] ([System.nanoTime]) at most: false when it had not by then.
         */
        fun drain(untilNanos: Long): Boolean
    }

    private val members = ConcurrentHashMap.newKeySet<Member>()

    @Volatile private var closed = false
    private var noticeThread: Thread? = null

    fun register(m: Member) {
        members += m
        if (noticeThread == null) synchronized(this) {
            if (noticeThread == null && !closed) {
                noticeThread = Thread.ofPlatform().daemon(true).name("tpcomm-mpi-notices").start(::pollNotices)
            }
        }
    }

    fun unregister(m: Member) {
        members -= m
    }

    /**
     * A thread of its own that tests every communicator's abort notices each period (what
     * [Member.pollPeerNotices] does under `MPI_THREAD_MULTIPLE`): MPI has no callback for an
     * arriving message, so this is a heartbeat, not a wait for a result. Not the deadline thread:
     * an MPI call here could wait on the library's lock while another thread is blocked in a
     * collective (MPICH's global critical section), and deadlines must never wait for MPI.
     */
    private fun pollNotices() {
        while (!closed) {
            for (m in members) {
                try {
                    m.pollPeerNotices()
                } catch (t: Throwable) {
                    t.printStackTrace()
                }
            }
            LockSupport.parkNanos(this, periodMillis * 1_000_000)
        }
    }

    /** What the registered communicators have in progress right now (for the shutdown message). */
    fun activeCalls(): List<String> = members.mapNotNull { it.describeActiveCall() }

    /** [Member.drain] of every registered communicator, before `MPI_Finalize`: false when one did not drain by [untilNanos]. */
    fun drain(untilNanos: Long): Boolean = members.toList().all { it.drain(untilNanos) }

    /** Every registered communicator, for [MpiRuntime.programFailed]. */
    fun all(): List<Member> = members.toList()

    /** Stops the notice thread, waiting (briefly) until it made its last MPI call: `MPI_Finalize` follows. */
    override fun close() {
        val poller = synchronized(this) {
            closed = true
            noticeThread
        }
        if (poller != null && poller !== Thread.currentThread()) {
            LockSupport.unpark(poller)
            poller.join(1_000)
        }
    }
}
