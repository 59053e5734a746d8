package dev.tpcomm.java

import java.util.concurrent.CompletionException
import java.util.concurrent.ExecutionException

/** The failure itself: [CompletionException] and [ExecutionException] wrappers removed. */
internal fun unwrapCompletion(error: Throwable): Throwable {
    var e = error
    while ((e is CompletionException || e is ExecutionException) && e.cause != null) e = e.cause!!
    return e
}

/** Reports a listener's exception without disturbing the caller or other listeners. */
internal fun reportListenerFailure(error: Throwable) {
    val thread = Thread.currentThread()
    try {
        thread.uncaughtExceptionHandler.uncaughtException(thread, error)
    } catch (_: Throwable) {
        // the handler itself failed: nothing more can be done without disturbing the caller
    }
}
