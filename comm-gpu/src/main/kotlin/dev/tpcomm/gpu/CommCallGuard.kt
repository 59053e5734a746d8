package dev.tpcomm.gpu

import java.lang.foreign.MemorySegment
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicBoolean
import java.util.concurrent.locks.ReentrantLock

/**
 * The library as one communicator ([comm]) uses it: every call on [comm] holds [lock] while it runs,
 * and none reaches the library once [comm] was released ([released]: aborted or destroyed), so
 * `ncclCommAbort` from another thread ([NcclCommHandle.aborted]'s escalation) never runs beside a
 * call on the communicator, and no call follows it (issue 35, finding 4). NVIDIA/nccl
 * `docs/userguide/source/usage/communicators.rst`, fault tolerance: "make sure no thread is calling
 * any NCCL operations while calling ncclCommAbort"; `ncclCommAbort` and `ncclCommGetAsyncError`
 * both complete the communicator's linked group job (`src/init.cc`, `ncclCommEnsureReady`,
 * `ncclCommGetAsyncError`; `src/group.cc` `ncclGroupJobComplete`). A group the communicator opens
 * (`ncclGroupStart` ... `ncclGroupEnd`, its point-to-point window or a batch) holds the lock from
 * start to end, since its calls are launched at the end.
 *
 * A call on [comm] after the release returns [NcclResult.INVALID_ARGUMENT] (the communicator's
 * failure was recorded first, so that is what callers see); calls on other handles (a split's child)
 * pass through. Thread-safe; the lock is reentrant and held by the native thread only for single
 * calls and open groups. Lifetime: the communicator's.
 */
internal class CommCallGuard(private val inner: NcclApi, private val comm: Long) : NcclApi by inner {
    /** Held while a call on [comm] runs (and while a group of it is open). */
    val lock = ReentrantLock()

    /** True once `ncclCommAbort` or `ncclCommDestroy` was called on [comm]. */
    val released = AtomicBoolean(false)

    /**
     * Runs [release] (which calls `ncclCommAbort`/`ncclCommFinalize`/`ncclCommDestroy` on the inner
     * library) once, holding [lock], waiting for it at most [waitNanos] (then false: a call on [comm]
     * is still running; try again). True when this or an earlier release happened.
     */
    fun releaseOnce(waitNanos: Long, release: (NcclApi) -> Unit): Boolean {
        if (!lock.tryLock(waitNanos.coerceAtLeast(0), TimeUnit.NANOSECONDS)) return released.get()
        try {
            if (released.compareAndSet(false, true)) release(inner)
            return true
        } finally {
            lock.unlock()
        }
    }

    private inline fun on(handle: Long, call: () -> Int): Int {
        if (handle != comm) return call()
        lock.lock()
        try {
            return if (released.get()) NcclResult.INVALID_ARGUMENT else call()
        } finally {
            lock.unlock()
        }
    }

    override fun commSplit(comm: Long, color: Int, key: Int, newComm: MemorySegment, config: NcclCommConfig?): Int = on(comm) { inner.commSplit(comm, color, key, newComm, config) }
    override fun commFinalize(comm: Long): Int = on(comm) { inner.commFinalize(comm) }

    override fun commAbort(comm: Long): Int {
        if (comm != this.comm) return inner.commAbort(comm)
        releaseOnce(Long.MAX_VALUE) { it.commAbort(comm) }
        return NcclResult.SUCCESS
    }

    override fun commDestroy(comm: Long): Int {
        if (comm != this.comm) return inner.commDestroy(comm)
        releaseOnce(Long.MAX_VALUE) { it.commDestroy(comm) }
        return NcclResult.SUCCESS
    }

    override fun commGetAsyncError(comm: Long, asyncError: IntArray): Int = on(comm) { inner.commGetAsyncError(comm, asyncError) }
    override fun commCount(comm: Long, count: IntArray): Int = on(comm) { inner.commCount(comm, count) }
    override fun commUserRank(comm: Long, rank: IntArray): Int = on(comm) { inner.commUserRank(comm, rank) }

    override fun allReduce(sendBuf: Long, recvBuf: Long, count: Long, datatype: Int, op: Int, comm: Long, stream: Long): Int =
        on(comm) { inner.allReduce(sendBuf, recvBuf, count, datatype, op, comm, stream) }

    override fun broadcast(sendBuf: Long, recvBuf: Long, count: Long, datatype: Int, root: Int, comm: Long, stream: Long): Int =
        on(comm) { inner.broadcast(sendBuf, recvBuf, count, datatype, root, comm, stream) }

    override fun reduce(sendBuf: Long, recvBuf: Long, count: Long, datatype: Int, op: Int, root: Int, comm: Long, stream: Long): Int =
        on(comm) { inner.reduce(sendBuf, recvBuf, count, datatype, op, root, comm, stream) }

    override fun allGather(sendBuf: Long, recvBuf: Long, sendCount: Long, datatype: Int, comm: Long, stream: Long): Int =
        on(comm) { inner.allGather(sendBuf, recvBuf, sendCount, datatype, comm, stream) }

    override fun reduceScatter(sendBuf: Long, recvBuf: Long, recvCount: Long, datatype: Int, op: Int, comm: Long, stream: Long): Int =
        on(comm) { inner.reduceScatter(sendBuf, recvBuf, recvCount, datatype, op, comm, stream) }

    override fun redOpCreatePreMulSum(op: IntArray, scalar: MemorySegment, datatype: Int, residence: Int, comm: Long): Int =
        on(comm) { inner.redOpCreatePreMulSum(op, scalar, datatype, residence, comm) }

    override fun redOpDestroy(op: Int, comm: Long): Int = on(comm) { inner.redOpDestroy(op, comm) }

    override fun send(sendBuf: Long, count: Long, datatype: Int, peer: Int, comm: Long, stream: Long): Int =
        on(comm) { inner.send(sendBuf, count, datatype, peer, comm, stream) }

    override fun recv(recvBuf: Long, count: Long, datatype: Int, peer: Int, comm: Long, stream: Long): Int =
        on(comm) { inner.recv(recvBuf, count, datatype, peer, comm, stream) }

    /** Opens a group of this communicator: the lock stays held until its [groupEnd]. */
    override fun groupStart(): Int {
        lock.lock()
        val code = inner.groupStart()
        if (code != NcclResult.SUCCESS) lock.unlock() // no group opened: no groupEnd will follow
        return code
    }

    /** Ends the group [groupStart] opened and lets go of the lock. */
    override fun groupEnd(): Int = try {
        inner.groupEnd()
    } finally {
        if (lock.isHeldByCurrentThread) lock.unlock()
    }

    override fun getLastError(comm: Long): String? {
        if (comm != this.comm) return inner.getLastError(comm)
        lock.lock()
        try {
            return if (released.get()) null else inner.getLastError(comm)
        } finally {
            lock.unlock()
        }
    }
}
