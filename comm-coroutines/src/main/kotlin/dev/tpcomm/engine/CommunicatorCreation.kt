package dev.tpcomm.engine

import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.NativeLibraryException
import dev.tpcomm.spi.CommunicationErrors
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeoutOrNull
import kotlin.time.Duration

/**
 * The creation of one communicator on one rank (a backend's `create`, the native init it waits for,
 * wrapping a handle), before there is a [CommunicatorFront]: what the front is for an operation, for
 * that step. Its deadline runs from this object's construction (the moment of the call), and its
 * failures are named in the one convention of [CommunicationErrors]: operation
 * [CommunicationErrors.CREATE], no sequence number, this [rank] and [backendName]. A backend builds
 * one per creation and never builds the exceptions itself.
 *
 * Thread-safe: immutable apart from the helper thread [onOwnThread] starts.
 */
@InternalTpcommApi
public class CommunicatorCreation(
    /** This rank, as its exceptions report it (the launcher's rank when the library cannot tell yet). */
    public val rank: Int,
    /** The backend's name (`mpi`, `nccl`, `rccl`). */
    public val backendName: String,
    /**
     * How long the creation may take, from this object's construction ([kotlin.time.Duration.INFINITE]:
     * no limit); backends pass `CommConfig.effectiveCreationTimeout`, never the operation timeout.
     */
    public val timeout: Duration,
) {
    private val errors = CommunicationErrors(rank, backendName)
    private val deadlineNanos: Long = if (timeout.isInfinite()) Long.MAX_VALUE else System.nanoTime() + timeout.inWholeNanoseconds

    /** Whether [timeout] has passed since the creation began. */
    public fun deadlinePassed(): Boolean = deadlineNanos != Long.MAX_VALUE && System.nanoTime() - deadlineNanos > 0

    /** The creation did not complete within [timeout]; [message] says what it waited for and what to check. */
    public fun timedOut(message: String): CommunicationTimeoutException =
        errors.timeout(CommunicationErrors.CREATE, CommunicationErrors.NO_SEQUENCE, message)

    /** A native call of the creation failed with [result] (a device runtime's code when [isRuntimeError]); [message] names the call. */
    public fun nativeFailure(message: String, result: Int, isRuntimeError: Boolean = false): NativeLibraryException =
        errors.nativeError(CommunicationErrors.CREATE, CommunicationErrors.NO_SEQUENCE, message, result, isRuntimeError)

    /** The creation was interrupted ([cause]) before it completed: a [CommunicatorAbortedException]. */
    public fun interrupted(message: String, cause: Throwable): CommunicatorAbortedException =
        errors.aborted(CommunicationErrors.CREATE, CommunicationErrors.NO_SEQUENCE, message, cause)

    /**
     * Runs [block] (a creation step that may wait for every rank inside a native library, beyond the
     * caller's reach) on a new daemon thread named [threadName], and returns its result if it
     * completes within what is left of [timeout]. Otherwise the result is never handed to anyone
     * ([block]'s thread is left to finish or stay blocked), [beforeThrow] sees the timeout (a
     * backend's job policy, e.g. ending the process), and the [CommunicationTimeoutException] of
     * [timedOut]`(`[lateMessage]`())` is thrown. A failure of [block] is rethrown as it is; a
     * cancelled caller leaves at once.
     */
    public suspend fun <T : Any> onOwnThread(
        threadName: String,
        lateMessage: () -> String,
        beforeThrow: (CommunicationTimeoutException) -> Unit = {},
        block: suspend () -> T,
    ): T {
        val made = CompletableDeferred<T>()
        Thread.ofPlatform().daemon(true).name(threadName).start {
            try {
                made.complete(runBlocking { block() })
            } catch (t: Throwable) {
                made.completeExceptionally(t)
            }
        }
        val left = if (deadlineNanos == Long.MAX_VALUE) Long.MAX_VALUE else (deadlineNanos - System.nanoTime()).coerceAtLeast(0L)
        val result = if (left == Long.MAX_VALUE) made.await() else withTimeoutOrNull(left / 1_000_000L + 1L) { made.await() }
        if (result != null) return result
        made.cancel() // a communicator made after the deadline is handed to no one
        val e = timedOut(lateMessage())
        beforeThrow(e)
        throw e
    }
}
