package dev.tpcomm.gpu

import dev.tpcomm.CommunicationException
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.engine.OperationFailure
import kotlin.time.Duration

/**
 * The named exceptions of one communicator's failures on the device: failed library and runtime
 * calls, deadlines, refusals after an earlier failure. Each fails the operation's flight record
 * first, so that the dump the exception carries shows it failed; the names come from the front's
 * exception factory ([exceptionOf], passed in).
 *
 * Role: message building only (it aborts nothing). Thread-safety: stateless, any thread. Lifetime:
 * created and owned by [NcclCommunicator].
 */
internal class NcclFailures(
    private val api: NcclApi,
    private val runtime: DeviceRuntime,
    private val comm: Long,
    private val timeout: Duration,
    /** The front's exception factory ([dev.tpcomm.engine.CommunicatorFront.exceptionOf]). */
    private val exceptionOf: (OperationFailure, String, Long) -> CommunicationException,
    /** The front's refusal message after a failure ([dev.tpcomm.engine.CommunicatorFront.abortedMessage]). */
    private val abortedMessage: (Throwable) -> String,
    /** `CommConfig.effectiveCreationTimeout`: the deadline of split and group, which their timeout names. */
    private val creationTimeout: Duration = timeout,
) {
    /** The named exception of [failure] in [operation] #[sequence]. */
    fun named(failure: OperationFailure, operation: String, sequence: Long): CommunicationException = exceptionOf(failure, operation, sequence)

    /** Why a call is refused (or ended) once the communicator failed with [cause]. */
    fun aborted(cause: Throwable): OperationFailure = OperationFailure(OperationFailure.ABORTED, abortedMessage(cause), cause)

    /** A failed library call of the operation of [entry] ([OperationFailure.NATIVE], named by the front's [exceptionOf]). */
    fun ncclError(code: Int, call: String, entry: FlightRecorder.Entry): CommunicationException {
        val text = runCatching { api.getErrorString(code) }.getOrNull()
        val last = runCatching { api.getLastError(comm) }.getOrNull()?.takeIf { it.isNotBlank() }
        val message = "$call failed: ${NcclResult.name(code)} ($code)" + (text?.let { ": $it" } ?: "") + (last?.let { " — $it" } ?: "") +
            ". ${NcclResult.hint(code)}. The communicator was aborted."
        entry.fail(RuntimeException(message))
        return exceptionOf(OperationFailure.native(message, code), entry.operation, entry.sequence)
    }

    /** The message of a failed runtime call. */
    fun runtimeMessage(code: Int, call: String): String {
        val text = runCatching { runtime.getErrorString(code) }.getOrNull()
        return "${runtime.platformName} $call failed with error $code" + (text?.let { ": $it" } ?: "") + ". The communicator was aborted."
    }

    /** A failed runtime call of the operation of [entry] (an [OperationFailure.NATIVE] flagged as the runtime's). */
    fun runtimeError(code: Int, call: String, entry: FlightRecorder.Entry): CommunicationException {
        val message = runtimeMessage(code, call)
        entry.fail(RuntimeException(message))
        return exceptionOf(OperationFailure.native(message, code, isRuntimeError = true), entry.operation, entry.sequence)
    }

    /** Why a call queued behind a native thread blocked in a library call failed: the deadline still runs from the call. */
    fun notStartedMessage(): String =
        "did not start within $timeout: the device's native thread was blocked in a library call the whole time " +
            "(another call of this device's communicators is stuck); the communicator was aborted with ncclCommAbort"

    /** The deadline [operation] is timed against: the creation timeout for split and group, else the operation timeout. */
    private fun limitOf(operation: String): String =
        if (operation == dev.tpcomm.spi.CollectiveOp.Split.apiName || operation == dev.tpcomm.spi.CollectiveOp.Group.apiName) {
            "$creationTimeout (CommConfig.creationTimeout)"
        } else {
            "$timeout"
        }

    /** The operation of [entry] passed its deadline ([OperationFailure.TIMEOUT]), queued or [started]. */
    fun timeoutError(entry: FlightRecorder.Entry, started: Boolean): CommunicationException {
        val message = if (!started) {
            notStartedMessage()
        } else {
            "did not complete within ${limitOf(entry.operation)} (a rank never arrived, or the device is stuck); " +
                "the communicator was aborted with ncclCommAbort"
        }
        entry.fail(RuntimeException(message))
        return exceptionOf(OperationFailure(OperationFailure.TIMEOUT, message), entry.operation, entry.sequence)
    }
}
