package dev.tpcomm.coroutines.local

import java.lang.ref.WeakReference
import java.util.concurrent.Executors
import java.util.concurrent.ScheduledExecutorService
import java.util.concurrent.ScheduledFuture
import java.util.concurrent.TimeUnit

/**
 * One daemon thread that checks every live local world periodically for calls past their deadline
 * (cancellation of a waiting rank is handled at once by its own cancellation handler, not here).
 * A world that became unreachable without being closed stops its own check.
 */
internal object Watchdog {
    private val executor: ScheduledExecutorService = Executors.newSingleThreadScheduledExecutor { r ->
        Thread(r, "tpcomm-local-watchdog").apply { isDaemon = true }
    }

    /** Period of the check: a tenth of the timeout, between 2 ms and 50 ms. */
    fun periodMillis(timeoutMillis: Long): Long = (timeoutMillis / 10).coerceIn(2, 50)

    fun schedule(world: LocalWorldState): ScheduledFuture<*> {
        val ref = WeakReference(world)
        val period = periodMillis(world.config.timeout.inWholeMilliseconds)
        lateinit var future: ScheduledFuture<*>
        val task = Runnable {
            val w = ref.get()
            if (w == null) {
                future.cancel(false)
            } else {
                try {
                    w.watchdogPass(System.nanoTime())
                } catch (t: Throwable) {
                    // A bug in the check must not kill the shared thread; abort that world instead.
                    w.abort(t)
                }
            }
        }
        future = executor.scheduleWithFixedDelay(task, period, period, TimeUnit.MILLISECONDS)
        return future
    }
}
