package dev.tpcomm.java

/**
 * Called when an operation of an [OperationQueue] completes normally.
 *
 * A Java functional interface: pass a lambda `(id, result) -> ...`. It runs on the thread that
 * completed the operation (a tpcomm worker thread), or on the registering thread if the operation
 * had already completed; keep it short and do not block in it. An exception it throws is handed to
 * the thread's uncaught-exception handler and does not stop other listeners.
 */
public fun interface CompletionListener {
    /**
     * @param operationId the id [OperationQueue.add] returned for the operation.
     * @param result the operation's result: a `Tensor`, a `MessageInfo`, null for operations
     * without a result, and so on.
     */
    public fun onCompletion(operationId: Long, result: Any?)
}

/**
 * Called when an operation of an [OperationQueue] fails or is cancelled.
 *
 * A Java functional interface: pass a lambda `(id, error) -> ...`. Runs as [CompletionListener] does.
 */
public fun interface FailureListener {
    /**
     * @param operationId the id [OperationQueue.add] returned for the operation.
     * @param error the failure itself, never a `CompletionException` wrapper: a
     * `CommunicationException` (or subclass), an `IllegalArgumentException` for bad arguments, or a
     * `java.util.concurrent.CancellationException` if the operation was cancelled.
     */
    public fun onFailure(operationId: Long, error: Throwable)
}
