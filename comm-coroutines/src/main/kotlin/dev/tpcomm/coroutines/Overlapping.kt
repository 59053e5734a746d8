package dev.tpcomm.coroutines

import dev.tpcomm.InternalTpcommApi
import kotlinx.coroutines.Job
import kotlin.coroutines.CoroutineContext

/**
 * A coroutine context element saying that the caller means to overlap the collectives called in
 * this context with its own work, so a backend must not hold the caller's thread for them: the MPI
 * backend, which runs a small blocking collective on the caller's thread when it may (see
 * `MpiConfig.callerRunsLimit`), hands it to the communicator's thread instead and suspends the
 * caller. [startCollective], the `*Async` functions, [overlap] and [pipeline] add it themselves;
 * add it to your own `async(Overlapping, start = CoroutineStart.UNDISPATCHED) { comm.allReduce(x) }`
 * when the code after it should run while the collective is in flight.
 *
 * Backends that never run a collective on the caller's thread (local, NCCL, RCCL) ignore it.
 * Immutable and thread-safe.
 */
public object Overlapping : CoroutineContext.Element, CoroutineContext.Key<Overlapping> {
    override val key: CoroutineContext.Key<*> get() = this

    override fun toString(): String = "Overlapping"
}

/**
 * Whether a backend may hold the caller's thread for a blocking call made in [context]: not when
 * the caller asked for overlap ([Overlapping]), and not under a `withTimeout`/`withTimeoutOrNull`,
 * whose deadline could not fire while its thread is blocked in the native library (the deadline's
 * event runs on that thread when the caller is `runBlocking`). The timeout is recognised by the
 * class of its job in the caller's job chain, kotlinx.coroutines' `TimeoutCoroutine` (`Timeout.kt`);
 * `CallerMayBeHeldTest` pins that for the version in use.
 */
@InternalTpcommApi
public fun callerMayBeHeld(context: CoroutineContext): Boolean {
    if (context[Overlapping] != null) return false
    var job: Job? = context[Job]
    var depth = 0
    while (job != null && depth++ < MAX_JOB_DEPTH) {
        if (job.javaClass.name == TIMEOUT_COROUTINE) return false
        job = job.parent
    }
    return job == null
}

private const val TIMEOUT_COROUTINE = "kotlinx.coroutines.TimeoutCoroutine"

/** Deeper job chains are not walked (the call is handed over, to be safe). */
private const val MAX_JOB_DEPTH = 64
