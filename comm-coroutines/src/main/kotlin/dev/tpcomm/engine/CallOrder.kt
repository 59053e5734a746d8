package dev.tpcomm.engine

import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.engine.DeadlineWatchdog
import dev.tpcomm.spi.CollectiveOp
import dev.tpcomm.spi.ObjectProtocol
import kotlinx.coroutines.currentCoroutineContext
import kotlinx.coroutines.ensureActive
import kotlinx.coroutines.withContext
import kotlin.coroutines.CoroutineContext
import kotlin.time.Duration

/**
 * The order of one communicator's calls: what its [CommunicatorFront] does under one lock so that
 * issue order is call order, for concurrent callers too. Each call is recorded in the flight
 * recorder, refused when the communicator is unusable, numbered (a collective's sequence number,
 * the same on every rank for the same call) and timed from that moment ([CallDeadlines], scanned by
 * the core's `DeadlineWatchdog` thread, which hands an operation past its deadline to the front once).
 * A composite operation (an object collective, a monitored barrier) is one call: recorded once,
 * timed from its call, its steps recorded under it, and (a collective one) holding the issue turn
 * ([IssueTurn]) from its call to its end, so that no other call of this rank is numbered between
 * its steps.
 *
 * Thread-safe: every member may be called from any thread; the numbering runs under [lock].
 * Owned by its front, for as long as it lives.
 */
internal class CallOrder(private val front: CommunicatorFront, private val recorder: FlightRecorder, timeout: Duration, creationTimeout: Duration = timeout) {
    /** Guards the numbering, the deadline queue and the issue turn. */
    private val lock = Any()
    private var collectiveSeq = 0L

    /** The operations in flight, timed from their call (guarded by [lock]). */
    private val deadlines = CallDeadlines(timeout, creationTimeout)

    /** How long any operation may take (messages of composite operations' deadlines). */
    private val callTimeout: Duration = timeout

    /** Who may number the next collective while a composite operation issues its steps (guarded by [lock]). */
    val turn = IssueTurn(lock)

    /** What the watchdog calls; a field, so that it lives as long as this communicator (the registration is weak). */
    private val deadlineScan = DeadlineWatchdog.Watched { _ -> scanDeadlines() }

    /** Weak: a communicator its user forgot to close is not kept alive by the watchdog. */
    private val deadlineRegistration: DeadlineWatchdog.Registration? =
        if (deadlines.enabled) DeadlineWatchdog.register(deadlineScan, deadlines.periodMillis, weak = true) else null

    /** Stops timing this communicator's operations (idempotent). */
    fun stopDeadlines() {
        deadlineRegistration?.close()
    }

    /** How many operations the deadline queue holds (finished ones not yet dropped included); for tests. */
    val trackedDeadlines: Int get() = synchronized(lock) { deadlines.tracked }

    // ------------------------------------------------------------------ collectives

    /**
     * Numbers, records and times a collective under the issue lock, or returns null when the caller
     * must first wait for the issue turn ([turn]): another caller's composite operation holds
     * it. A step of the composite that holds it ([context] carries it) is numbered at once.
     */
    fun tryBegin(
        op: CollectiveOp, input: Tensor?, output: Tensor?, sig: Tensor?, reduceOp: ReduceOp?, root: Int, dim: Int,
        sizes: List<Int>?, outputSizes: List<Int>?, extra: Any?, context: CoroutineContext,
    ): OperationCall? {
        synchronized(lock) {
            val holder = turn.holder ?: return number(op, input, output, sig, reduceOp, root, dim, sizes, outputSizes, extra, null)
            val composite = context[CompositeOperation]
            if (composite == null || holder !== composite) return null
            return number(op, input, output, sig, reduceOp, root, dim, sizes, outputSizes, extra, composite)
        }
    }

    /** Numbers a call in the issue turn [waiter] the caller holds (passing it on when that fails). */
    fun numberInTurn(
        waiter: IssueTurn.Waiter, op: CollectiveOp, input: Tensor?, output: Tensor?, sig: Tensor?, reduceOp: ReduceOp?, root: Int, dim: Int,
        sizes: List<Int>?, outputSizes: List<Int>?, extra: Any?,
    ): OperationCall {
        try {
            return synchronized(lock) { number(op, input, output, sig, reduceOp, root, dim, sizes, outputSizes, extra, null) }
        } catch (t: Throwable) {
            turn.pass(waiter)
            throw t
        }
    }

    /**
     * Under the issue lock: records the call (a step of [composite] under its record), refuses it
     * when the communicator is unusable, numbers it and starts its deadline (a step's is its
     * composite's).
     */
    fun number(
        op: CollectiveOp, input: Tensor?, output: Tensor?, sig: Tensor?, reduceOp: ReduceOp?, root: Int, dim: Int,
        sizes: List<Int>?, outputSizes: List<Int>?, extra: Any?, composite: CompositeOperation?,
    ): OperationCall {
        val entry = if (composite != null) {
            recorder.step(composite.entry, queued = front.backend.queuesCalls)
        } else {
            recorder.start(
                op.apiName, sig?.dtype, sig?.shape, sig?.byteSize ?: 0L,
                root = if (root >= 0) root else FlightRecorder.NONE, reduceOp = reduceOp,
                dim = if (op.hasDim) dim else FlightRecorder.NONE, queued = front.backend.queuesCalls,
            )
        }
        val name = entry.operation
        front.refuseUnusable(name, entry, true)
        if (composite == null) {
            val call = OperationCall(
                op, entry, ++collectiveSeq, input, output, sig, reduceOp, root, dim, sizes, outputSizes, extra,
                reproducibleOp = if (extra === ExactReduction) reduceOp else null,
            )
            deadlines.track(entry, call, creation = op == CollectiveOp.Split || op == CollectiveOp.Group || op == CollectiveOp.Duplicate)
            return call
        }
        composite.expired?.let { e -> entry.fail(e); throw e }
        val call = OperationCall(op, entry, ++collectiveSeq, input, output, sig, reduceOp, root, dim, sizes, outputSizes, extra, composite.op, ++composite.steps, composite.reproducibleOp)
        composite.stepEntry = entry
        composite.stepCall = call
        return call
    }


    // ------------------------------------------------------------------ point to point and the backend's own operations

    fun beginPointToPoint(name: String, tensor: Tensor?, peer: Int, tag: Int, composite: CompositeOperation?): FlightRecorder.Entry {
        synchronized(lock) {
            if (composite != null) return step(composite, collective = false)
            val entry = recorder.start(name, tensor?.dtype, tensor?.shape, tensor?.byteSize ?: 0L, peer = peer, tag = tag, queued = front.backend.queuesCalls)
            front.refuseUnusable(name, entry, false)
            deadlines.track(entry, null)
            return entry
        }
    }


    suspend fun beginOwnCollective(name: String, root: Int, composite: CompositeOperation?): FlightRecorder.Entry {
        synchronized(lock) {
            if (composite != null && turn.holder === composite) return step(composite, collective = true)
            if (turn.holder == null) return startOwn(name, root)
        }
        val w = turn.await()
        val entry = try {
            synchronized(lock) { startOwn(name, root) }
        } catch (t: Throwable) {
            turn.pass(w); throw t
        }
        // Held until the operation ends (a backend orders its own operations as they reach it), whoever ends it.
        entry.onFinish = Runnable { turn.pass(w) }
        if (!entry.inFlight) turn.pass(w)
        return entry
    }

    /** Under the issue lock: [beginOwnCollective]'s record, refusal and deadline. */
    fun startOwn(name: String, root: Int): FlightRecorder.Entry {
        val entry = recorder.start(name, root = root, queued = front.backend.queuesCalls)
        front.refuseUnusable(name, entry, true)
        deadlines.track(entry, null)
        return entry
    }

    /** Under the issue lock: a backend's own step of [composite] (a staged collective or a message), recorded under it. */
    fun step(composite: CompositeOperation, collective: Boolean): FlightRecorder.Entry {
        val entry = recorder.step(composite.entry, queued = front.backend.queuesCalls)
        val name = entry.operation
        front.refuseUnusable(name, entry, collective)
        composite.expired?.let { e -> entry.fail(e); throw e }
        composite.steps++
        if (collective) {
            entry.composite = composite
            entry.stepIndex = composite.steps
        }
        composite.stepEntry = entry
        composite.stepCall = null
        return entry
    }


    // ------------------------------------------------------------------ composite operations

    /**
     * Runs [block], the steps of the composite operation [op], as one operation: recorded once (with
     * [root], or [peer] and [tag] for a point-to-point one), refused when the communicator is
     * unusable, timed from now, and (a collective one) holding the issue turn until it ends, so that
     * no other call of this communicator on this rank is numbered between its steps: issue order is
     * call order for composites too, however the calls are started. Completes or fails its record.
     */
    suspend fun <R> composite(op: CollectiveOp, root: Int, peer: Int, tag: Int, block: suspend (CompositeOperation) -> R): R {
        val context = currentCoroutineContext()
        context.ensureActive()
        val collective = !op.isPointToPoint
        val c = if (!collective) {
            synchronized(lock) { startComposite(op, root, peer, tag, null) }
        } else {
            synchronized(lock) { if (turn.holder == null) startComposite(op, root, peer, tag, null) else null }
                ?: turn.await().let { w ->
                    try {
                        synchronized(lock) { startComposite(op, root, peer, tag, w) }
                    } catch (t: Throwable) {
                        turn.pass(w); throw t
                    }
                }
        }
        try {
            val r = withContext(c) { block(c) }
            c.entry.complete()
            return r
        } catch (t: Throwable) {
            throw front.failure(c.entry, t)
        } finally {
            if (collective) turn.pass(c)
        }
    }

    /**
     * Under the issue lock: records a composite, refuses it when unusable, takes the issue turn (a
     * collective one; from [waiter] when it waited for it) and starts its deadline.
     */
    fun startComposite(op: CollectiveOp, root: Int, peer: Int, tag: Int, waiter: IssueTurn.Waiter?): CompositeOperation {
        val name = op.apiName
        val entry = recorder.start(name, root = root, peer = if (op.isPointToPoint) peer else FlightRecorder.NONE, tag = tag, queued = front.backend.queuesCalls)
        front.refuseUnusable(name, entry, !op.isPointToPoint)
        val c = CompositeOperation(front, op, entry, ObjectProtocol.Naming(front.errors, entry.sequence), if (root >= 0) root else -1)
        if (!op.isPointToPoint) {
            turn.takeOver(waiter, c)
        }
        deadlines.track(entry, c)
        return c
    }

    /**
     * The deadline of composite [c] (recorded as [entry]) passed: its step in flight ends as any
     * operation does at its deadline ([deadlinePassed]); between steps, the next step is refused
     * with the timeout and the backend ends what it must.
     */
    fun compositeDeadline(entry: FlightRecorder.Entry, c: CompositeOperation) {
        val step = c.stepEntry
        if (step != null && step.inFlight) {
            front.backend.deadlinePassed(step, c.stepCall)
            return
        }
        val e = front.errors.timeout(entry.operation, entry.sequence, "${entry.operation} did not complete within $callTimeout")
        c.expired = e
        front.expire(entry, e)
        front.backend.deadlinePassed(entry, null)
    }

    // ------------------------------------------------------------------ deadlines

    fun scanDeadlines() {
        val expired = ArrayList<Any?>(0)
        // The time is read under the lock: never before the call of anything tracked so far.
        synchronized(lock) { deadlines.collect(System.nanoTime(), expired) }
        var i = 0
        while (i < expired.size) {
            val entry = expired[i] as FlightRecorder.Entry
            // A call that ended since it was collected (outside the lock) is not aborted.
            if (!entry.inFlight) { i += 2; continue }
            try {
                val target = expired[i + 1]
                if (target is CompositeOperation) compositeDeadline(entry, target) else front.backend.deadlinePassed(entry, target as OperationCall?)
            } catch (t: Throwable) {
                // A bug in a backend's abort must not go unnoticed, nor leave the call waiting.
                entry.fail(t)
                System.err.println("tpcomm: ${front.backendName} rank ${front.rank}: ending ${entry.operation} #${entry.sequence} at its deadline failed: $t")
                t.printStackTrace()
            }
            i += 2
        }
    }


}
