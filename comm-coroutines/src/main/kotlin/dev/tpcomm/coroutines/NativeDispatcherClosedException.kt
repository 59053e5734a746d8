package dev.tpcomm.coroutines

/** A [NativeDispatcher] was closed while a coroutine waited on it, or before a call reached it. */
public class NativeDispatcherClosedException(message: String) : IllegalStateException(message) {
    internal companion object
}
