package dev.tpcomm.engine

import dev.tpcomm.InternalTpcommApi

/**
 * Why an operation failed, as a backend reports it to [CommunicatorFront]: a [kind] and what to
 * say. The front turns it into the named exception ([CommunicatorFront.exceptionOf]); a backend
 * never builds a `CommunicationException` itself. Immutable.
 */
@InternalTpcommApi
public class OperationFailure @JvmOverloads public constructor(
    /** [MISMATCH], [TIMEOUT], [ABORTED], [NATIVE] or [OTHER]. */
    public val kind: Int,
    /** The reason, as the exception will word it (without rank, backend, operation or sequence: the front adds them). */
    public val message: String,
    /** The failure behind this one, when known. */
    public val cause: Throwable? = null,
    /** For [MISMATCH]: the ranks whose call differs from rank 0's. */
    public val ranks: List<Int> = emptyList(),
    /** For [MISMATCH]: the fields of the call that differ. */
    public val fields: List<String> = emptyList(),
    /** For [NATIVE]: the library's (or, with [isRuntimeError], the device runtime's) result code. */
    public val code: Int = 0,
    /** For [NATIVE]: whether [code] is the device runtime's (CUDA, HIP) rather than the communication library's. */
    public val isRuntimeError: Boolean = false,
) {
    public companion object {
        /** The ranks called different operations or arguments (`CollectiveMismatchException`). */
        public const val MISMATCH: Int = 0

        /** A deadline passed (`CommunicationTimeoutException`). */
        public const val TIMEOUT: Int = 1

        /** The communicator was aborted or a peer is gone (`CommunicatorAbortedException`). */
        public const val ABORTED: Int = 2

        /** A native library call failed with [code] (`NativeLibraryException`). */
        public const val NATIVE: Int = 3

        /** Anything else (a peer's bad data, say): a plain `CommunicationException`. */
        public const val OTHER: Int = 4

        /** A [NATIVE] failure: [message] about the call that returned [code]. */
        @JvmStatic
        @JvmOverloads
        public fun native(message: String, code: Int, isRuntimeError: Boolean = false): OperationFailure =
            OperationFailure(NATIVE, message, null, emptyList(), emptyList(), code, isRuntimeError)
    }
}

/**
 * A failure a backend throws from inside an operation: [CommunicatorFront] catches it and throws
 * the named exception built from [failure] instead. Never reaches users.
 */
@InternalTpcommApi
public class OperationFailedSignal(
    /** What failed, and why. */
    public val failure: OperationFailure,
) : RuntimeException(failure.message, failure.cause, false, false)
