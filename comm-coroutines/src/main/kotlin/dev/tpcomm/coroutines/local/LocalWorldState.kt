package dev.tpcomm.coroutines.local

import dev.tpcomm.CommConfig
import dev.tpcomm.spi.DeadlineWatchdog
import java.util.concurrent.CopyOnWriteArrayList
import java.util.concurrent.atomic.AtomicBoolean
import java.util.concurrent.atomic.AtomicReference

/**
 * State shared by a world and every group split from it: the abort flag and the watchdog.
 *
 * An abort anywhere aborts the whole tree (the world and all its sub-groups): a rank failing in a
 * tensor-parallel group would otherwise leave its data-parallel peers waiting for it. The first
 * cause wins and is kept as [abortCause].
 */
internal class LocalWorldState(val config: CommConfig) : DeadlineWatchdog.Watched {
    private val cause = AtomicReference<Throwable?>(null)
    val groups = CopyOnWriteArrayList<LocalGroup>()

    /** The world's own group (set once by LocalWorld); when all its ranks closed, the world closes. */
    @Volatile var rootGroup: LocalGroup? = null
    private val closed = AtomicBoolean(false)
    @Volatile private var watchdogTask: DeadlineWatchdog.Registration? = null

    val abortCause: Throwable? get() = cause.get()
    val isClosed: Boolean get() = closed.get()

    /**
     * Aborts the world with [reason] as the original cause. Every pending slot fails with
     * [failure] (or a generic abort failure) and every pending receive fails; later calls fail
     * with CommunicatorAbortedException. Returns false if the world was already aborted.
     */
    fun abort(reason: Throwable, failure: SlotFailure? = null, timedOut: Any? = null): Boolean {
        if (!cause.compareAndSet(null, reason)) return false
        val generic = SlotFailure(SlotFailure.ABORTED, "the communicator was aborted: ${describe(reason)}", reason)
        for (g in groups) g.failPending(failure, generic, timedOut)
        stopWatchdog()
        return true
    }

    /**
     * Registers with the core's [DeadlineWatchdog], weakly: a world that became unreachable without
     * being closed stops its own check. The period is a tenth of the timeout, between 2 and 50 ms.
     */
    fun startWatchdog() {
        watchdogTask = DeadlineWatchdog.register(this, DeadlineWatchdog.periodFor(config.timeout.inWholeMilliseconds), weak = true)
    }

    private fun stopWatchdog() {
        watchdogTask?.close()
    }

    /** The watchdog's call: [check], and a bug in the check aborts this world rather than going unnoticed. */
    override fun checkDeadlines(nowNanos: Long) {
        try {
            check(nowNanos)
        } catch (t: Throwable) {
            abort(t)
        }
    }

    /** Closes the world: pending calls fail, later calls throw CommunicatorAbortedException. */
    fun close(reason: Throwable) {
        if (!closed.compareAndSet(false, true)) return
        for (g in groups) g.markAllClosed()
        abort(reason)
        stopWatchdog()
    }

    /** One watchdog pass: deadlines and cancelled waiters of every group. */
    fun check(nowNanos: Long) {
        if (cause.get() != null) { stopWatchdog(); return }
        for (g in groups) {
            if (g.check(nowNanos)) return
        }
    }

    companion object {
        fun describe(t: Throwable): String = (t.message ?: t.javaClass.simpleName)
    }
}
