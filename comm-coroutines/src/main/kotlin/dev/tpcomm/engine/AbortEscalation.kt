package dev.tpcomm.engine

import dev.tpcomm.InternalTpcommApi

/**
 * The one way a native backend forces an abort that its library did not carry out in time: the
 * backend asks for the abort the ordinary way first (on its native thread, or by calling the
 * library's abort), and [after] starts a guard that, [graceMillis] later, forces it from a thread
 * of its own, one that no library call can block. The GPU engine forces `ncclCommAbort` when its
 * native thread, blocked in a library call, did not take the queued abort (as PyTorch's watchdog
 * calls `ncclCommAbort` from its own thread while the issuing thread is blocked:
 * pytorch/pytorch `torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp`, `abortCommsFromMap`); the MPI
 * backend ends the process when `MPI_Abort` neither ended it nor returned (MPICH 4.0's can spin
 * inside the library while another thread is blocked in a collective).
 *
 * A guard that must retry ([retrying]: the library is busy with a call that must end first) is
 * bounded: it stops at its bound with an [AbortIncompleteException], logged and handed to the
 * backend, and its thread ends; it never retries for ever.
 *
 * Thread-safe. The guard is a daemon thread: it never keeps the JVM alive.
 */
@InternalTpcommApi
public object AbortEscalation {
    /**
     * Runs [force] on a new daemon platform thread named [threadName] once [graceMillis] ms have
     * passed, and returns that thread. [force] decides itself whether there is still anything to force
     * (the abort may have completed meanwhile); an interrupt cuts the grace short, it does not cancel
     * [force]. What [force] throws is reported on the thread's uncaught-exception handler.
     */
    public fun after(threadName: String, graceMillis: Long, force: () -> Unit): Thread {
        require(graceMillis >= 0) { "graceMillis must be >= 0, got $graceMillis" }
        return Thread.ofPlatform().daemon(true).name(threadName).start {
            try {
                Thread.sleep(graceMillis)
            } catch (_: InterruptedException) {
                // Forced now rather than never: the guard exists because the abort may not happen.
            }
            force()
        }
    }

    /**
     * Runs [attempt] on a new daemon platform thread named [threadName] once [graceMillis] ms have
     * passed, again while it returns false, until it returns true (forced, or nothing left to
     * force) or [boundMillis] ms have passed since the first attempt; returns that thread.
     * [attempt] should wait a little itself (a lock with a timeout), as each retry follows at once.
     * At the bound, or when [attempt] throws (its exception the cause), the thread builds an
     * [AbortIncompleteException] saying [what] and how many attempts were made, logs it (logger
     * `dev.tpcomm.engine.AbortEscalation`, WARNING), hands it to [gaveUp] and ends: the escalation
     * holds nothing afterwards. An interrupt cuts the grace short, it does not cancel the attempts.
     * What [gaveUp] throws is reported on the thread's uncaught-exception handler.
     */
    public fun retrying(
        threadName: String,
        graceMillis: Long,
        boundMillis: Long,
        what: String,
        attempt: () -> Boolean,
        gaveUp: (AbortIncompleteException) -> Unit,
    ): Thread {
        require(graceMillis >= 0) { "graceMillis must be >= 0, got $graceMillis" }
        require(boundMillis >= 0) { "boundMillis must be >= 0, got $boundMillis" }
        return after(threadName, graceMillis) {
            val start = System.nanoTime()
            val boundNanos = boundMillis * 1_000_000L
            var attempts = 0
            var failure: Throwable? = null
            while (true) {
                attempts++
                val done = try {
                    attempt()
                } catch (t: Throwable) {
                    failure = t
                    false
                }
                if (done) return@after
                if (failure != null || System.nanoTime() - start >= boundNanos) break
            }
            val waited = (System.nanoTime() - start) / 1_000_000L
            val e = AbortIncompleteException(
                if (failure != null) {
                    "$what: the forced abort failed at attempt $attempts after $waited ms; it is not retried"
                } else {
                    "$what: the forced abort did not take place in $attempts attempts over $waited ms (bound $boundMillis ms): " +
                        "the library stayed busy with a call that did not return; the escalation stops here"
                },
                failure,
            )
            LOG.log(System.Logger.Level.WARNING, e.message, e)
            gaveUp(e)
        }
    }

    private val LOG: System.Logger = System.getLogger("dev.tpcomm.engine.AbortEscalation")
}
