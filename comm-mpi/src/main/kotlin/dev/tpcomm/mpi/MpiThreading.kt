package dev.tpcomm.mpi

import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.coroutines.callerMayBeHeld
import dev.tpcomm.engine.CommunicatorFront
import dev.tpcomm.engine.NativeDispatcher
import dev.tpcomm.engine.NativeDispatcherClosedException
import dev.tpcomm.engine.OperationCall
import dev.tpcomm.engine.OperationFailedSignal
import dev.tpcomm.engine.OperationFailure
import kotlinx.coroutines.Job
import kotlinx.coroutines.TimeoutCancellationException
import kotlinx.coroutines.currentCoroutineContext
import kotlinx.coroutines.ensureActive
import kotlinx.coroutines.suspendCancellableCoroutine
import kotlin.coroutines.EmptyCoroutineContext
import kotlin.coroutines.cancellation.CancellationException

/**
 * Where one MPI communicator's collectives run, and how a caller waits for them (the threading
 * policy of [MpiCommunicator]):
 *
 * - **the fast path**: blocking progress and the caller already on the communicator's thread
 *   ([fastPath]): the MPI calls run right there;
 * - **caller runs**: a small blocking collective runs on its caller's thread when the communicator
 *   has a thread of its own (`MPI_THREAD_MULTIPLE`), the caller may be held ([callerMayBeHeld]: no
 *   `withTimeout`, no [dev.tpcomm.coroutines.Overlapping]) and that thread is idle
 *   ([NativeDispatcher.runHereIfIdle]): the natural call path at the fast path's cost;
 * - **hand-off**: otherwise on the communicator's thread ([onThread]) with the caller suspended, the
 *   front's retained tensors handed over ([MpiHandOff]); in non-blocking progress the operation is
 *   an `MPI_I*` request ([MpiPending]) polled by the thread's progress loop.
 *
 * A caller released while its call is queued or inside MPI (its cancellation, its `withTimeout`)
 * aborts the communicator through the front ([cancelledInFlight]); one whose deadline passed while
 * queued is released by the front's deadline ([MpiFailures.deadlinePassed], [MpiHandOff.release]).
 */
internal class MpiThreading(
    private val front: CommunicatorFront,
    val dispatcher: NativeDispatcher,
    val check: MpiConsistencyCheck,
    private val requests: MpiRequests,
    /** Blocking progress ([MpiProgress.Blocking]): collectives are blocking MPI calls. */
    val blockingMode: Boolean,
    /** Whether [dispatcher] is this communicator's own (`MPI_THREAD_MULTIPLE`). */
    ownsDispatcher: Boolean,
    /** [MpiConfig.callerRunsLimit]. */
    val callerRunsLimit: Long,
    /** The communicator's name, for messages. */
    private val name: String,
) {
    val failures: MpiFailures = check.calls.failures

    /**
     * Whether a collective may run on its caller's thread ([MpiConfig.callerRunsLimit]): blocking
     * mode, and a thread of this communicator's own (`MPI_THREAD_MULTIPLE`), so MPI may be called
     * from any thread as long as this communicator's calls do not overlap, which
     * [NativeDispatcher.runHereIfIdle] guarantees.
     */
    val callerRuns: Boolean = blockingMode && ownsDispatcher && callerRunsLimit > 0

    /**
     * The small-message fast path: blocking mode and the caller already on this communicator's
     * thread, so the MPI calls (the signature exchange with the consistency check, then the
     * operation) run right here with no dispatch, lambda or continuation of their own (same
     * semantics as [collective]).
     */
    fun fastPath(): Boolean = blockingMode && dispatcher.isNativeThread && !dispatcher.isClosed

    /**
     * Runs [block] (a blocking collective of [call] on [tensor]) on this thread when the front's
     * `issue` may: the fast path, or caller runs for this size with the thread idle. True when it ran.
     */
    inline fun runsHere(call: OperationCall, tensor: Tensor, crossinline block: () -> Unit): Boolean {
        if (fastPath()) {
            block()
            return true
        }
        if (!callerRuns || tensor.byteSize > callerRunsLimit || !callerMayBeHeld(call.context)) return false
        return dispatcher.runHereIfIdle { block() }
    }

    /** A blocking collective on whichever thread owns MPI now, after the library's own check right before the native call. */
    inline fun inlineBlocking(
        entry: FlightRecorder.Entry, operation: String, keepAlive: Any?, sig: LongArray?, preSignature: MpiConsistencyCheck.PreSignature? = null,
        payload: MpiSlotPayload? = null, call: () -> Int,
    ) {
        // The state may have changed since the front's check.
        failures.ensureUsable(operation, entry)
        check.checkedBlockingCall(entry, operation, keepAlive, sig, preSignature, payload, call)
    }

    /** The largest buffer of an operation's [keepAlive] (a tensor, an array of them, or null), in bytes. */
    private fun largestBuffer(keepAlive: Any?): Long = when (keepAlive) {
        null -> 0L
        is Tensor -> keepAlive.byteSize
        is Array<*> -> keepAlive.maxOfOrNull { (it as? Tensor)?.byteSize ?: 0L } ?: 0L
        else -> Long.MAX_VALUE
    }

    /**
     * Issues collective [call] (signature exchange first when enabled) and waits for it: on the
     * caller's thread when [callerRuns] allows it for this size, the caller may be held and the
     * communicator's thread is idle (the front's retain holds the tensors until the blocking call
     * returned), else on the communicator's thread with the caller suspended: then the front's
     * retained tensors are handed over ([MpiHandOff]) and released once both the caller left and
     * MPI is done with them. [keepAlive] holds every buffer MPI touches (the call's tensors and
     * the backend's staging); [blocking] is the blocking MPI call, [start] the non-blocking one.
     */
    suspend fun collective(
        call: OperationCall,
        sig: LongArray?,
        keepAlive: Any?,
        blocking: () -> Int,
        start: (Long) -> Int,
        preSignature: MpiConsistencyCheck.PreSignature? = null,
        payload: MpiSlotPayload? = null,
    ) {
        val entry = call.entry
        val operation = call.name
        if (callerRuns && largestBuffer(keepAlive) <= callerRunsLimit) {
            val context = currentCoroutineContext()
            // A caller cancelled before the call must not start it (as on the communicator's thread).
            context.ensureActive()
            // Not under the caller's withTimeout (its deadline must fire) or an Overlapping start.
            if (callerMayBeHeld(context) &&
                dispatcher.runHereIfIdle { inlineBlocking(entry, operation, keepAlive, sig, preSignature, payload, blocking) }
            ) {
                return
            }
        }
        val handOff = handOver(call)
        val callerJob = if (blockingMode) null else currentCoroutineContext()[Job]
        val pending = inFlight(entry) {
            onThread(handOff) {
                var handedToRequest = false
                try {
                    // The library's own check, right before the native call: the state may have changed while queued.
                    failures.ensureUsable(operation, entry)
                    if (!blockingMode) failures.checkAbortNotices(operation, entry)
                    if (blockingMode) {
                        check.checkedBlockingCall(entry, operation, keepAlive, sig, preSignature, payload, blocking)
                        null
                    } else {
                        // The signature exchange completes before the operation starts, so mismatched
                        // collectives never reach MPI; polling it here keeps issue order = call order.
                        if (sig != null) {
                            if (preSignature != null) preSignature.polling(sig, callerJob, check.watchesNotices)
                            check.exchangePolling(sig, operation, entry, callerJob)
                            failures.ensureUsable(operation, entry)
                        }
                        // A caller cancelled while the signature was exchanged must not start the operation.
                        if (callerJob?.isCancelled == true) throw CancellationException("cancelled before $operation started")
                        val p = MpiPending(requests, entry, operation, MpiPending.Kind.Request, keepAlive)
                        failures.check(start(p.request), operation, entry)
                        p.handOff = handOff
                        handedToRequest = true
                        p.mainPending = true
                        p.issued()
                        p
                    }
                } finally {
                    // MPI is done with the tensors (a blocking call returned, or nothing was started),
                    // unless a non-blocking operation took them: it lets them go when it completes
                    // (and never when it fails: MPI may still write them).
                    if (!handedToRequest) handOff.mpiDone()
                }
            }
        }
        if (pending != null) inFlight(entry) { dispatcher.await(pending) }
    }

    /**
     * The hand-off of collective [call] to the communicator's thread ([OperationCall.state], where
     * [MpiFailures.deadlinePassed] finds it): the front's retained tensors become the backend's to
     * release ([CommunicatorFront.handOverTensors]; the backend's `await` lets the caller's side go
     * when it returns, [MpiHandOff.callerLeft]).
     */
    fun handOver(call: OperationCall): MpiHandOff {
        val h = MpiHandOff(front, call, null)
        call.state = h
        front.handOverTensors(call.entry)
        return h
    }

    /** The hand-off of the front's retained [tensor] of the message recorded as [entry] ([CommunicatorFront.handOverTensors]). */
    fun handOver(entry: FlightRecorder.Entry, tensor: Tensor): MpiHandOff {
        front.handOverTensors(entry)
        return MpiHandOff(front, null, tensor)
    }

    /**
     * Runs [block], a caller's wait for MPI (its call queued for or running on the communicator's
     * thread): a closed thread ends it as a closed communicator, and the caller's cancellation
     * ([cancelledInFlight]) aborts the communicator.
     */
    suspend inline fun <T> inFlight(entry: FlightRecorder.Entry, block: () -> T): T =
        try {
            block()
        } catch (e: NativeDispatcherClosedException) {
            throw OperationFailedSignal(OperationFailure(OperationFailure.ABORTED, "the communicator was closed", e))
        } catch (c: CancellationException) {
            throw cancelledInFlight(entry, c)
        }

    /**
     * The caller of [entry]'s operation was cancelled ([c]: its `withTimeout`, a cancelled handle)
     * while its call was queued for or inside MPI: the peers cannot finish it without this rank, so
     * the communicator aborts through the front ([CommunicatorFront.abortWith], the peers told),
     * with the front's [CommunicatorFront.cancellationReason]: a caller's deadline is the named
     * [CommunicationTimeoutException] the caller gets; any other cancellation stays the caller's.
     * A blocking MPI call still in progress stays under the watchdog, which applies the job policy
     * (`MPI_Abort` with [MpiConfig.abortOnTimeout]) at the communicator's deadline.
     */
    suspend fun cancelledInFlight(entry: FlightRecorder.Entry, c: CancellationException): Throwable {
        // The thread may end the block with its own CancellationException (its signature poll saw
        // the caller cancelled) before the caller's own reaches it: the caller's cause is the one to report.
        val cause = try {
            currentCoroutineContext().ensureActive()
            c
        } catch (own: CancellationException) {
            own
        }
        val reason = front.cancellationReason(entry.operation, entry.sequence, cause, "while its call was in flight")
        front.abortWith(reason, MpiFailures.abortDetail(notifyPeers = true, MpiAbortNotices.REASON_FAILED, now = false))
        return if (cause is TimeoutCancellationException) reason else cause
    }

    /**
     * Runs [block] on the communicator's thread and returns its result (inline when already there).
     * Unlike `withContext`, the caller does not wait for a block that is running when its coroutine
     * is cancelled (its `withTimeout` expired, its handle was cancelled): it is resumed at once,
     * while the blocking MPI call goes on under the watchdog (the communicator is aborted by the
     * caller's cancellation, see [cancelledInFlight]). A block cancelled before it started never
     * starts, nor does one whose deadline passed while it was queued: its caller is released then
     * with the [CommunicationTimeoutException] ([MpiHandOff.release]), whatever holds the thread
     * (not with the opt-in spinning hand-off, `TPCOMM_MPI_HANDOFF_SPIN_US`, whose caller waits for
     * the thread).
     *
     * @throws NativeDispatcherClosedException when the thread is closed.
     */
    suspend fun <T> onThread(handOff: MpiHandOff, block: () -> T): T {
        if (dispatcher.isNativeThread) {
            handOff.start()
            return block()
        }
        if (dispatcher.isClosed) throw NativeDispatcherClosedException("the MPI thread of $name is closed")
        if (HANDOFF_SPIN_NANOS > 0) {
            // The spinning hand-off's caller waits for the thread: its block always starts.
            handOff.start()
            return dispatcher.handOff(HANDOFF_SPIN_NANOS) { detached(block) }
        }
        return suspendCancellableCoroutine { cont ->
            // Cancelled while queued: the block never starts, so MPI never holds the tensors.
            cont.invokeOnCancellation { if (handOff.abandon()) handOff.mpiDone() }
            handOff.waitWith(cont)
            dispatcher.dispatch(EmptyCoroutineContext, Runnable {
                // Started: from here its deadline is the job policy's ([MpiFailures.deadlinePassed]), not a release.
                // A call cancelled (or released at its deadline) while queued never starts: the other ranks are told by the abort.
                if (handOff.start()) cont.resumeWith(runCatching { detached(block) })
            })
        }
    }

    /** Runs [block] with [MpiConsistencyCheck.callerDetached] set: its caller waits elsewhere and may be released before it returns. */
    private inline fun <T> detached(block: () -> T): T {
        check.callerDetached = true
        try {
            return block()
        } finally {
            check.callerDetached = false
        }
    }
}
