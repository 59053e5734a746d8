package dev.tpcomm.coroutines.local

import dev.tpcomm.coroutines.OperationFailure
import dev.tpcomm.CommConfig
import dev.tpcomm.spi.CommunicationErrors
import dev.tpcomm.spi.FailureState
import java.util.concurrent.CopyOnWriteArrayList
import java.util.concurrent.atomic.AtomicBoolean

/**
 * State shared by a world and every group split from it: the abort flag. Deadlines are each
 * rank's front's ([LocalCommunicator.deadlinePassed] aborts the world).
 *
 * An abort anywhere aborts the whole tree (the world and all its sub-groups): a rank failing in a
 * tensor-parallel group would otherwise leave its data-parallel peers waiting for it. The first
 * cause wins and is kept as [abortCause].
 */
internal class LocalWorldState(val config: CommConfig) {
    /** The world's failure state (rank -1: the world, not one rank): the first cause wins. */
    val errors = CommunicationErrors(-1, LocalCommunicator.BACKEND) { null }
    val failures = FailureState(errors)

    /** [LocalBackendFactory.ALLOW_HEAP_MEMORY_OPTION]: read (and refused when malformed) once, at creation. */
    val allowHeapMemory: Boolean = LocalBackendFactory.allowHeapMemory(config)

    /** [LocalBackendFactory.EAGER_LIMIT_OPTION]: read (and refused when malformed) once, at creation. */
    val eagerLimit: Long = LocalBackendFactory.eagerLimit(config)
    val groups = CopyOnWriteArrayList<LocalGroup>()

    /** The world's own group (set once by LocalWorld); when all its ranks closed, the world closes. */
    @Volatile var rootGroup: LocalGroup? = null
    private val closed = AtomicBoolean(false)

    val abortCause: Throwable? get() = failures.cause
    val isClosed: Boolean get() = closed.get()

    /**
     * Aborts the world with [reason] as the original cause. Every pending slot fails with
     * [failure] (or a generic abort failure) and every pending receive fails; later calls fail
     * with CommunicatorAbortedException. Returns false if the world was already aborted.
     */
    fun abort(reason: Throwable, failure: OperationFailure? = null, timedOut: Any? = null): Boolean {
        if (!failures.abort(reason)) return false
        for (g in groups) for (c in g.communicators) c.flightRecorder.recordAbort(reason)
        val generic = OperationFailure(OperationFailure.ABORTED, "the communicator was aborted: ${describe(reason)}", reason)
        for (g in groups) g.failPending(failure, generic, timedOut)
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
