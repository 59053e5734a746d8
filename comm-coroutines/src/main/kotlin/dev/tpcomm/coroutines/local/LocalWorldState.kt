package dev.tpcomm.coroutines.local

import dev.tpcomm.CommConfig
import java.util.concurrent.CopyOnWriteArrayList
import java.util.concurrent.ScheduledFuture
import java.util.concurrent.atomic.AtomicBoolean
import dev.tpcomm.spi.FailureState

/**
 * State shared by a world and every group split from it: the abort flag and the watchdog.
 *
 * An abort anywhere aborts the whole tree (the world and all its sub-groups): a rank failing in a
 * tensor-parallel group would otherwise leave its data-parallel peers waiting for it. The first
 * cause wins and is kept as [abortCause].
 */
internal class LocalWorldState(val config: CommConfig) {
    /** The world's failure state (rank -1: the world, not one rank): the first cause wins. */
    val failures = FailureState(-1, LocalCommunicator.BACKEND) { null }
    val groups = CopyOnWriteArrayList<LocalGroup>()

    /** The world's own group (set once by LocalWorld); when all its ranks closed, the world closes. */
    @Volatile var rootGroup: LocalGroup? = null
    private val closed = AtomicBoolean(false)
    @Volatile private var watchdogTask: ScheduledFuture<*>? = null

    val abortCause: Throwable? get() = failures.cause
    val isClosed: Boolean get() = closed.get()

    /**
     * Aborts the world with [reason] as the original cause. Every pending slot fails with
     * [failure] (or a generic abort failure) and every pending receive fails; later calls fail
     * with CommunicatorAbortedException. Returns false if the world was already aborted.
     */
    fun abort(reason: Throwable, failure: SlotFailure? = null, timedOut: Any? = null): Boolean {
        if (!failures.abort(reason)) return false
        val generic = SlotFailure(SlotFailure.ABORTED, "the communicator was aborted: ${describe(reason)}", reason)
        for (g in groups) g.failPending(failure, generic, timedOut)
        stopWatchdog()
        return true
    }

    fun startWatchdog() {
        watchdogTask = Watchdog.schedule(this)
    }

    private fun stopWatchdog() {
        watchdogTask?.cancel(false)
    }

    /** Closes the world: pending calls fail, later calls throw CommunicatorAbortedException. */
    fun close(reason: Throwable) {
        if (!closed.compareAndSet(false, true)) return
        for (g in groups) g.markAllClosed()
        abort(reason)
        stopWatchdog()
    }

    /** One watchdog pass: the deadlines of every group. */
    fun watchdogPass(nowNanos: Long) {
        if (failures.isAborted) { stopWatchdog(); return }
        for (g in groups) {
            if (g.watchdogPass(nowNanos)) return
        }
    }

    companion object {
        fun describe(t: Throwable): String = (t.message ?: t.javaClass.simpleName)
    }
}
