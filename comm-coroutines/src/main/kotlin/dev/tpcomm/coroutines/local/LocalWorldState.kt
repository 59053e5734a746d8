package dev.tpcomm.coroutines.local

import dev.tpcomm.CommConfig
import dev.tpcomm.spi.CommunicationErrors
import java.util.concurrent.CopyOnWriteArrayList
import java.util.concurrent.atomic.AtomicBoolean
import java.util.concurrent.atomic.AtomicReference

/**
 * State shared by a world and every group split from it: its configuration, its groups, and the
 * abort of the world as a whole. Deadlines are each rank's front's ([LocalBackend.deadlinePassed]).
 *
 * A failure of one communicator (a mismatch, a missed deadline, a cancelled in-flight call, a rank
 * closing while others wait for it) aborts that communicator's [LocalGroup] alone, as MPI and NCCL
 * fail one communicator and leave the others usable. Only [abort] here (a rank's program failed,
 * [dev.tpcomm.coroutines.LocalWorld.abort], [close]) aborts every group, as the end of a process
 * ends every communicator it had. The first cause wins and is kept as [abortCause].
 */
internal class LocalWorldState(val config: CommConfig) {
    /** The world's failure state (rank -1: the world, not one rank): the first cause wins. */
    val errors = CommunicationErrors(-1, LocalBackend.BACKEND) { null }

    /** Why the whole world (every group, present and future) was aborted: the first cause wins. */
    private val worldAbort = AtomicReference<Throwable?>(null)

    /** Why the whole world was aborted ([abort]), or null; a group's own failure does not show here. */
    val worldAbortCause: Throwable? get() = worldAbort.get()

    /** [LocalBackendFactory.ALLOW_HEAP_MEMORY_OPTION]: read (and refused when malformed) once, at creation. */
    val allowHeapMemory: Boolean = LocalBackendFactory.allowHeapMemory(config)

    /** [LocalBackendFactory.EAGER_LIMIT_OPTION]: read (and refused when malformed) once, at creation. */
    val eagerLimit: Long = LocalBackendFactory.eagerLimit(config)

    /** [LocalBackendFactory.TIMING_OPTION]: read (and refused when malformed) once, at creation. */
    val timing: Boolean = LocalBackendFactory.timing(config)

    val groups = CopyOnWriteArrayList<LocalGroup>()

    /** The world's own group (set once by LocalWorld); when all its ranks closed, the world closes. */
    @Volatile var rootGroup: LocalGroup? = null
    private val closed = AtomicBoolean(false)

    /**
     * Why the world's own communicators failed (their group's first failure, or the abort of the
     * whole world), or null while they are usable. A failure of a group split from the world does
     * not show here.
     */
    val abortCause: Throwable? get() = rootGroup?.abortCause ?: worldAbort.get()
    val isClosed: Boolean get() = closed.get()

    /**
     * Aborts the whole world with [reason]: every group, and any group a split still in progress
     * makes ([LocalGroup]'s constructor checks [abortCause]). Every pending call fails and later calls
     * fail with CommunicatorAbortedException. Returns false if the world was already aborted.
     */
    fun abort(reason: Throwable): Boolean {
        if (!worldAbort.compareAndSet(null, reason)) return false
        for (g in groups) g.abort(reason)
        return true
    }

    /** Closes the world: pending calls fail, later calls throw CommunicatorAbortedException. */
    fun close(reason: Throwable) {
        if (!closed.compareAndSet(false, true)) return
        for (g in groups) g.markAllClosed()
        abort(reason)
    }

    companion object {
        fun describe(t: Throwable): String = (t.message ?: t.javaClass.simpleName)
    }
}
