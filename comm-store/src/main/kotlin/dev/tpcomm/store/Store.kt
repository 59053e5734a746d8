package dev.tpcomm.store

import kotlin.time.Duration

/**
 * A key-value store that the processes of a job share to find each other (rendezvous): the
 * operations of PyTorch's `c10d::Store`, as suspend functions. Keys are strings (sent as UTF-8
 * bytes), values are bytes.
 *
 * Implementations: [TcpStore] (a client of a server that speaks PyTorch's TCPStore protocol:
 * [TcpStoreServer], PyTorch's own, or torchrun's agent store) and its [withPrefix] views.
 *
 * Guarantees of every implementation:
 * - **Thread-safety**: every operation may be called from any thread or coroutine; calls on one
 *   store are served one at a time, in the order they take its lock (PyTorch's client serialises
 *   them the same way, with its `activeOpLock_`).
 * - **Deadlines**: every call ends within [timeout] (or the timeout it is given), with a
 *   [StoreTimeoutException] when it did not complete; none waits forever.
 * - **Cancellation**: every call is cancellable; a cancelled call returns promptly with a
 *   `CancellationException`, and the store stays usable (a TCP client drops the connection the
 *   cancelled call was using and reconnects on its next call). Whether a cancelled write reached
 *   the server is unknown.
 * - **Failure**: a server that goes away fails the calls with [StoreConnectionException];
 *   calls after [close] fail with [IllegalStateException].
 */
public interface Store : AutoCloseable {
    /** The default deadline of each call ([wait] and [get] take their own too). */
    public val timeout: Duration

    /** Stores [value] under [key], replacing what was there, and wakes the waiters for [key]. */
    public suspend fun set(key: String, value: ByteArray)

    /**
     * The value of [key], waiting up to [timeout] for it to be set (PyTorch's `get` waits too:
     * `TCPStore::doGet` sends WAIT before GET).
     *
     * @throws StoreTimeoutException when [key] was not set within [timeout].
     */
    public suspend fun get(key: String, timeout: Duration = this.timeout): ByteArray

    /**
     * Adds [delta] to the counter [key] (a missing key counts as 0) and returns the new value. The
     * counter is stored as its ASCII decimal digits, as PyTorch's server stores it
     * (`LibUVStoreDaemon::add`), so `get` of a counter gives e.g. `"12"`.
     *
     * @throws StoreException when [key] holds something that is not a decimal number (PyTorch's
     * server closes the connection then).
     */
    public suspend fun add(key: String, delta: Long): Long

    /**
     * Atomically replaces the value of [key] by [desired] if it equals [expected], and returns the
     * value now stored. A missing key with an empty [expected] stores [desired]; a missing key with
     * another [expected] stores nothing and returns [expected] (PyTorch's server does the same,
     * `LibUVStoreDaemon::compareAndSet`).
     */
    public suspend fun compareSet(key: String, expected: ByteArray, desired: ByteArray): ByteArray

    /** Whether every key of [keys] is set now; never waits. */
    public suspend fun check(keys: List<String>): Boolean

    /**
     * Suspends until every key of [keys] is set.
     *
     * @throws StoreTimeoutException naming the keys when they were not all set within [timeout].
     */
    public suspend fun wait(keys: List<String>, timeout: Duration = this.timeout)

    /** Deletes [key]; true if it existed. Waiters for [key] are not woken (as in PyTorch). */
    public suspend fun delete(key: String): Boolean

    /**
     * How many keys the whole store holds, whatever their prefix (PyTorch's `getNumKeys` counts
     * every key of the server, its worker counter `init/` included).
     */
    public suspend fun numKeys(): Long

    /**
     * The values of [keys], in order, waiting up to [timeout] until all are set (as
     * `TCPStore::multiGet` does).
     *
     * @throws StoreTimeoutException when they were not all set within [timeout].
     */
    public suspend fun multiGet(keys: List<String>, timeout: Duration = this.timeout): List<ByteArray>

    /** Sets every key of [values] (one request; waiters are woken key by key). */
    public suspend fun multiSet(values: Map<String, ByteArray>)

    /** Appends [value] to the value of [key] (a missing key is created with [value]). */
    public suspend fun append(key: String, value: ByteArray)

    /**
     * A view of this store whose keys are `"$prefix/$key"` (PyTorch's `PrefixStore` joins with `/`,
     * so a tpcomm view and a PyTorch `PrefixStore` with the same prefix see the same keys). The view
     * shares this store's connection: closing the view does nothing; closing this store closes it.
     */
    public fun withPrefix(prefix: String): Store = PrefixStore(this, prefix)

    /** Releases the store's connection (and nothing on the server). Idempotent. */
    override fun close()
}
