package dev.tpcomm.engine

import dev.tpcomm.InternalTpcommApi

/**
 * A forced abort ([AbortEscalation.retrying]) stopped trying before the library's abort took place:
 * every attempt within its bound found the library still busy (a call on the communicator that does
 * not return), or an attempt failed ([cause]). The communicator's own failure was recorded before
 * the escalation started, so its callers already have their exception; this one is logged (logger
 * `dev.tpcomm.engine.AbortEscalation`, level WARNING) and handed to the backend, which says what is
 * left (e.g. the abort still queued on its native thread, done once the blocked call returns).
 *
 * Immutable and thread-safe, as any exception.
 */
@InternalTpcommApi
public class AbortIncompleteException(message: String, cause: Throwable? = null) : IllegalStateException(message, cause)
