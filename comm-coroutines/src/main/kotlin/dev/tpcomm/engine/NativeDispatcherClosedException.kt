package dev.tpcomm.engine

import dev.tpcomm.InternalTpcommApi

/** A [NativeDispatcher] was closed while a coroutine waited on it, or before a call reached it. */
@InternalTpcommApi
public class NativeDispatcherClosedException(message: String) : IllegalStateException(message) {
    internal companion object
}
