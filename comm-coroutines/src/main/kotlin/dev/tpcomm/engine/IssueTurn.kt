package dev.tpcomm.engine

import kotlinx.coroutines.CancellableContinuation
import kotlinx.coroutines.suspendCancellableCoroutine

/**
 * The issue turn of one communicator: who may number its next collective while a composite
 * operation issues its steps, so that no other call of that rank is numbered between them (issue
 * order is call order for composites too). Free most of the time: the front's fast path reads
 * [holder] under its issue lock and finds null. While it is held (by a [CompositeOperation], or by a
 * [Waiter] it was handed to), other callers [await] it, first come first served, and each passes it
 * on ([pass]) once the backend took its call.
 *
 * Thread-safe: [holder] and [takeOver] are used under [lock] (the front's issue lock); [await] and
 * [pass] take it themselves. Cancellation: a waiter cancelled before it got the turn leaves the
 * queue; one cancelled after it was handed the turn passes it on. Owned by its front.
 */
internal class IssueTurn(private val lock: Any) {
    /** A caller waiting for the turn. Its fields are guarded by the turn's lock. */
    class Waiter {
        internal var granted = false
        internal var cont: CancellableContinuation<Unit>? = null
    }

    /** Who holds the turn (a composite operation, or a [Waiter] it was handed to); null when free. Read under the lock. */
    var holder: Any? = null
        private set

    private val queue = ArrayDeque<Waiter>()

    /** Under the lock: [owner] takes the turn from [from] (null: it is free), which must hold it. */
    fun takeOver(from: Waiter?, owner: Any) {
        check(holder === from) { "the issue turn is held by $holder, not by $from" }
        holder = owner
    }

    /** Waits (cancellably) until the turn is this caller's; the caller then passes it on with [pass]. */
    suspend fun await(): Waiter {
        val w = Waiter()
        synchronized(lock) {
            if (holder == null) { holder = w; return w }
            queue.addLast(w)
        }
        suspendCancellableCoroutine<Unit> { cont ->
            // Not yet given the turn: leave the queue. Given it: the resumption's handler passes it on.
            cont.invokeOnCancellation { synchronized(lock) { if (!w.granted) queue.remove(w) } }
            val granted = synchronized(lock) { if (!w.granted) w.cont = cont; w.granted }
            if (granted) cont.resume(Unit) { _, _, _ -> pass(w) }
        }
        return w
    }

    /** Passes the turn from [from] to the first waiter, or frees it; nothing when [from] does not hold it. */
    fun pass(from: Any) {
        val next: Waiter
        val cont: CancellableContinuation<Unit>
        synchronized(lock) {
            if (holder !== from) return
            val first = queue.removeFirstOrNull()
            holder = first
            if (first == null) return
            first.granted = true
            next = first
            cont = first.cont ?: return // it has not suspended yet: it finds itself granted
        }
        cont.resume(Unit) { _, _, _ -> pass(next) }
    }
}
