package dev.tpcomm.store

import dev.tpcomm.CommunicationException

/**
 * A [Store] call failed. [operation] names the call (`set`, `get`, `wait`, `connect`, ...); the
 * message names the store (its address or file) and the keys involved. Rank and sequence number are
 * -1: a store serves a job before any communicator exists. The backend is `"store"`.
 */
public open class StoreException(
    message: String,
    operation: String,
    cause: Throwable? = null,
) : CommunicationException(message, -1, "store", operation, -1, cause)

/**
 * A [Store] call passed its deadline: a [Store.wait] or [Store.get] whose keys never came, or a
 * server that did not answer within the store's timeout. After a timed-out [Store.wait] the
 * connection is still usable (the client cancelled the wait as PyTorch's client does); after any
 * other timeout the client drops the connection and reconnects on the next call.
 */
public open class StoreTimeoutException(
    message: String,
    operation: String,
    cause: Throwable? = null,
) : StoreException(message, operation, cause) {
    /** Whether the client's connection is still in step (a wait that was cancelled with CANCEL_WAIT). */
    internal var keepsConnection: Boolean = false
}

/**
 * The store's server went away or could not be reached: the connection was refused until the
 * store's timeout, reset, or closed by the server (a server that died, or one that closed this
 * connection because of a request over its limits). The call's effect on the server is unknown;
 * the next call tries to reconnect.
 */
public open class StoreConnectionException(
    message: String,
    operation: String,
    cause: Throwable? = null,
) : StoreException(message, operation, cause)
