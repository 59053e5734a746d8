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
}
