package dev.tpcomm.store

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.runInterruptible
import kotlinx.coroutines.sync.Mutex
import kotlinx.coroutines.sync.withLock
import java.nio.charset.StandardCharsets
import java.util.concurrent.ThreadLocalRandom
import kotlin.coroutines.cancellation.CancellationException
import kotlin.time.Duration
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/**
 * A client of a server that speaks PyTorch's TCPStore protocol: [TcpStoreServer], PyTorch's own
 * `TCPStore` server (libuv or legacy), or torchrun's agent store. What it sends is what PyTorch's
 * client (`torch/csrc/distributed/c10d/TCPStore.cpp`) sends, byte for byte: VALIDATE then PING on
 * connect (`TCPStore::TCPStore`), every user key with the `/` prefix (`TCPStore::keyPrefix_`), a
 * WAIT before each GET and MULTI_GET (`TCPStore::doGet`, `TCPStore::multiGet`), and CANCEL_WAIT when
 * a wait times out, accepting a late STOP_WAITING first (`TCPStore::doWait`). So a PyTorch process
 * and a tpcomm process that use the same key see the same value.
 *
 * One TCP connection, one request at a time (a [Mutex], as PyTorch's `activeOpLock_`). Each call
 * runs on [Dispatchers.IO] and waits in a `select` with a deadline, so timeouts always fire, and
 * a cancelled caller returns promptly: the connection it was using is dropped (its request may or
 * may not have reached the server) and the next call reconnects. A connection the server closed
 * (the server died, or closed it for a request over its limits) fails that call and every later
 * one with [StoreConnectionException]; connect again.
 *
 * Thread-safe. Create with [connect].
 */
public class TcpStore private constructor(
    /** The server's host name or address. */
    public val host: String,
    /** The server's port. */
    public val port: Int,
    override val timeout: Duration,
    private var connection: ClientConnection?,
    private val secret: ByteArray?,
) : Store {
    private val lock = Mutex()

    @Volatile private var closed = false

    /** Why the server's connection was lost, once it was: later calls fail at once with it. */
    @Volatile private var lost: String? = null

    private val address get() = "$host:$port"

    override suspend fun set(key: String, value: ByteArray) {
        checkValue(value)
        request("set", listOf(key)) { c, d -> send(c, d, writer(StoreProtocol.SET).key(key).bytes(value)) }
    }

    override suspend fun get(key: String, timeout: Duration): ByteArray = request("get", listOf(key)) { c, _ ->
        awaitKeys(c, listOf(prefixed(key)), timeout, "get")
        val d = stepDeadline()
        send(c, d, writer(StoreProtocol.GET).key(key))
        readBytes(c, d, "get")
    }

    override suspend fun add(key: String, delta: Long): Long = request("add", listOf(key)) { c, d ->
        send(c, d, writer(StoreProtocol.ADD).key(key).i64(delta))
        readI64(c, d, "add")
    }

    override suspend fun compareSet(key: String, expected: ByteArray, desired: ByteArray): ByteArray {
        checkValue(expected)
        checkValue(desired)
        return request("compareSet", listOf(key)) { c, d ->
            send(c, d, writer(StoreProtocol.COMPARE_SET).key(key).bytes(expected).bytes(desired))
            readBytes(c, d, "compareSet")
        }
    }

    override suspend fun check(keys: List<String>): Boolean {
        checkCount(keys.size)
        return request("check", keys) { c, d ->
            val w = writer(StoreProtocol.CHECK).i64(keys.size.toLong())
            keys.forEach { w.key(it) }
            send(c, d, w)
            need(c, 1, d, "check")
            when (val r = c.u8()) {
                StoreProtocol.CHECK_READY -> true
                StoreProtocol.CHECK_NOT_READY -> false
                else -> throw protocolError("check", "answered $r, not READY (0) or NOT_READY (1)")
            }
        }
    }

    override suspend fun wait(keys: List<String>, timeout: Duration) {
        checkCount(keys.size)
        request("wait", keys) { c, _ -> awaitKeys(c, keys.map(::prefixed), timeout, "wait") }
    }

    override suspend fun delete(key: String): Boolean = request("delete", listOf(key)) { c, d ->
        send(c, d, writer(StoreProtocol.DELETE_KEY).key(key))
        readI64(c, d, "delete") == 1L
    }

    override suspend fun numKeys(): Long = request("numKeys", emptyList()) { c, d ->
        send(c, d, writer(StoreProtocol.GETNUMKEYS))
        readI64(c, d, "numKeys")
    }

    override suspend fun multiGet(keys: List<String>, timeout: Duration): List<ByteArray> {
        checkCount(keys.size)
        return request("multiGet", keys) { c, _ ->
            awaitKeys(c, keys.map(::prefixed), timeout, "multiGet")
            val d = stepDeadline()
            val w = writer(StoreProtocol.MULTI_GET).i64(keys.size.toLong())
            keys.forEach { w.key(it) }
            send(c, d, w)
            keys.map { readBytes(c, d, "multiGet") }
        }
    }

    override suspend fun multiSet(values: Map<String, ByteArray>) {
        checkCount(values.size)
        values.values.forEach(::checkValue)
        request("multiSet", values.keys.toList()) { c, d ->
            val w = writer(StoreProtocol.MULTI_SET).i64(values.size.toLong())
            values.forEach { (k, v) -> w.key(k).bytes(v) }
            send(c, d, w)
        }
    }

    override suspend fun append(key: String, value: ByteArray) {
        checkValue(value)
        request("append", listOf(key)) { c, d -> send(c, d, writer(StoreProtocol.APPEND).key(key).bytes(value)) }
    }

    /**
     * Every key the server holds, in no particular order (LIST_KEYS, PyTorch 2.8 and later), with
     * the client's `/` prefix removed where a key has it (so the keys [set] wrote come back as
     * written; the worker counter comes back as `init/`).
     */
    public suspend fun listKeys(): List<String> = request("listKeys", emptyList()) { c, d ->
        send(c, d, writer(StoreProtocol.LIST_KEYS))
        val n = readI64(c, d, "listKeys")
        if (n < 0 || n > Int.MAX_VALUE) throw protocolError("listKeys", "answered a key count of $n")
        List(n.toInt()) {
            val k = String(readBytes(c, d, "listKeys"), StandardCharsets.UTF_8)
            k.removePrefix(StoreProtocol.KEY_PREFIX)
        }
    }

    /**
     * Checks that the server answers: PING with [nonce], which the server echoes (PyTorch 2.5 and
     * later; `TCPStore::ping` sends the process id).
     *
     * @throws StoreException when the server echoes another number.
     */
    public suspend fun ping(nonce: Int = ProcessHandle.current().pid().toInt()): Unit = request("ping", emptyList()) { c, d ->
        doPing(c, d, nonce)
    }

    /** Appends [value] to the queue [key] (QUEUE_PUSH, PyTorch 2.8 and later; libuv server only). */
    public suspend fun queuePush(key: String, value: ByteArray) {
        checkValue(value)
        request("queuePush", listOf(key)) { c, d -> send(c, d, writer(StoreProtocol.QUEUE_PUSH).key(key).bytes(value)) }
    }

    /**
     * Takes the first value of the queue [key], waiting up to [timeout] for one (as
     * `TCPStore::queuePop` with `block = true`: WAIT, then QUEUE_POP).
     *
     * @throws StoreTimeoutException when the queue stayed empty for [timeout].
     */
    public suspend fun queuePop(key: String, timeout: Duration = this.timeout): ByteArray = request("queuePop", listOf(key)) { c, _ ->
        awaitKeys(c, listOf(prefixed(key)), timeout, "queuePop")
        val d = stepDeadline()
        send(c, d, writer(StoreProtocol.QUEUE_POP).key(key))
        val n = readI64(c, d, "queuePop")
        if (n <= 0) throw StoreException("queue '$key' of the store at $address was empty when popped (another client took its value)", "queuePop")
        readBytes(c, d, "queuePop")
    }

    /** The length of the queue [key] (QUEUE_LEN); 0 for a queue never pushed to. */
    public suspend fun queueLen(key: String): Long = request("queueLen", listOf(key)) { c, d ->
        send(c, d, writer(StoreProtocol.QUEUE_LEN).key(key))
        readI64(c, d, "queueLen")
    }

    /**
     * Counts this process as one worker of the job: adds 1 to the counter `init/` (sent without
     * the `/` prefix, as `TCPStore::waitForWorkers` does; a PyTorch server started with
     * `world_size = N` and `wait_for_workers` waits until it reaches N). Returns the new count.
     */
    public suspend fun registerWorker(): Long = request("registerWorker", listOf(StoreProtocol.INIT_KEY)) { c, d ->
        send(c, d, RequestWriter().u8(StoreProtocol.ADD).bytes(StoreProtocol.INIT_KEY.toByteArray()).i64(1))
        readI64(c, d, "registerWorker")
    }

    /**
     * Waits until [workers] processes counted themselves with [registerWorker] (the host's side of
     * `TCPStore::waitForWorkers`: it polls `init/` every 10 ms; this waits for the key, then polls
     * its value with the same period).
     *
     * @throws StoreTimeoutException naming how many joined when fewer than [workers] did within [timeout].
     */
    public suspend fun waitForWorkers(workers: Int, timeout: Duration = this.timeout) {
        require(workers >= 1) { "workers must be >= 1, got $workers" }
        val deadline = System.nanoTime() + timeout.inWholeNanoseconds.coerceAtLeast(0)
        var joined = 0L
        while (true) {
            val left = (deadline - System.nanoTime()).coerceAtLeast(0)
            joined = request("waitForWorkers", listOf(StoreProtocol.INIT_KEY)) { c, d ->
                val key = StoreProtocol.INIT_KEY.toByteArray()
                send(c, d, RequestWriter().u8(StoreProtocol.CHECK).i64(1).bytes(key))
                need(c, 1, d, "waitForWorkers")
                if (c.u8() != StoreProtocol.CHECK_READY) return@request 0L
                send(c, d, RequestWriter().u8(StoreProtocol.GET).bytes(key))
                String(readBytes(c, d, "waitForWorkers"), StandardCharsets.US_ASCII).trim().toLongOrNull() ?: 0L
            }
            if (joined >= workers) return
            if (left == 0L) {
                throw StoreTimeoutException(
                    "$joined of $workers workers joined the store at $address within $timeout; " +
                        "check that every process was started and reaches this store",
                    "waitForWorkers",
                )
            }
            kotlinx.coroutines.delay(minOf(10L, left / 1_000_000 + 1).milliseconds)
        }
    }

    override fun close() {
        closed = true
        // A caller inside a request holds the connection; closing it under them ends their call.
        connection?.close()
    }

    override fun toString(): String = "TcpStore($address)"

    // ---- machinery ----

    private fun prefixed(key: String) = StoreProtocol.KEY_PREFIX + key

    /** The deadline of one request after a wait (a wait may outlast the store's timeout: it has its own). */
    private fun stepDeadline() = System.nanoTime() + timeout.inWholeNanoseconds

    private fun writer(code: Int) = RequestWriter().u8(code)

    private fun RequestWriter.key(key: String): RequestWriter {
        val bytes = prefixed(key).toByteArray(StandardCharsets.UTF_8)
        return bytes(bytes)
    }

    private fun checkKey(key: String) {
        val n = prefixed(key).toByteArray(StandardCharsets.UTF_8).size
        require(n <= StoreProtocol.MAX_KEY_BYTES) {
            "store key of $n bytes (with its '/' prefix) is over the ${StoreProtocol.MAX_KEY_BYTES}-byte limit of PyTorch's TCPStore server; use a shorter key"
        }
    }

    private fun checkValue(value: ByteArray) {
        require(value.size <= StoreProtocol.MAX_VALUE_BYTES) {
            "store value of ${value.size} bytes is over the ${StoreProtocol.MAX_VALUE_BYTES}-byte (8 MiB) limit of PyTorch's TCPStore server; split it over several keys"
        }
    }

    private fun checkCount(n: Int) {
        require(n <= StoreProtocol.MAX_KEY_COUNT) {
            "$n keys in one request are over the ${StoreProtocol.MAX_KEY_COUNT}-key limit of PyTorch's TCPStore server; split the request"
        }
    }

    private fun send(c: ClientConnection, deadline: Long, w: RequestWriter) {
        if (!c.write(w.toBuffer(), deadline)) throw DeadlinePassed()
    }

    private fun need(c: ClientConnection, n: Int, deadline: Long, op: String) {
        if (!c.fill(n, deadline)) throw DeadlinePassed()
    }

    private fun readI64(c: ClientConnection, deadline: Long, op: String): Long {
        need(c, 8, deadline, op)
        return c.i64()
    }

    private fun readBytes(c: ClientConnection, deadline: Long, op: String): ByteArray {
        val n = readI64(c, deadline, op)
        if (n < 0 || n > Int.MAX_VALUE - 16) throw protocolError(op, "announced a value of $n bytes")
        need(c, n.toInt(), deadline, op)
        return c.take(n.toInt())
    }

    private fun protocolError(op: String, what: String): StoreConnectionException {
        val message = "the store server at $address $what; it does not speak PyTorch's TCPStore protocol (or this connection got out of step)"
        return StoreConnectionException(message, op)
    }

    /**
     * WAIT for [keys] (already prefixed) up to [timeout]; on the timeout CANCEL_WAIT, accepting a
     * STOP_WAITING that crossed it (`TCPStore::doWait`), then [StoreTimeoutException].
     */
    private fun awaitKeys(c: ClientConnection, keys: List<String>, timeout: Duration, op: String) {
        val storeDeadline = System.nanoTime() + this.timeout.inWholeNanoseconds
        val w = RequestWriter().u8(StoreProtocol.WAIT).i64(keys.size.toLong())
        keys.forEach { w.bytes(it.toByteArray(StandardCharsets.UTF_8)) }
        send(c, storeDeadline, w)
        val waitDeadline = System.nanoTime() + timeout.inWholeNanoseconds.coerceAtLeast(0)
        if (c.fill(1, waitDeadline)) {
            val r = c.u8()
            if (r != StoreProtocol.STOP_WAITING) throw protocolError(op, "answered WAIT with $r, not STOP_WAITING (0)")
            return
        }
        val cancelDeadline = System.nanoTime() + this.timeout.inWholeNanoseconds
        send(c, cancelDeadline, RequestWriter().u8(StoreProtocol.CANCEL_WAIT))
        need(c, 1, cancelDeadline, op)
        var r = c.u8()
        if (r == StoreProtocol.STOP_WAITING) {
            need(c, 1, cancelDeadline, op)
            r = c.u8()
        }
        if (r != StoreProtocol.WAIT_CANCELED) throw protocolError(op, "answered CANCEL_WAIT with $r, not WAIT_CANCELED (1)")
        val names = keys.joinToString { "'" + it.removePrefix(StoreProtocol.KEY_PREFIX) + "'" }
        throw StoreTimeoutException(
            "keys $names were not all set in the store at $address within $timeout; check that the process that sets them is running and uses the same store and prefix",
            op,
        ).also { it.keepsConnection = true }
    }

    private fun doPing(c: ClientConnection, deadline: Long, nonce: Int) {
        send(c, deadline, RequestWriter().u8(StoreProtocol.PING).u32(nonce))
        need(c, 4, deadline, "ping")
        val back = c.u32()
        if (back != nonce) throw StoreException("the store server at $address answered PING $nonce with $back", "ping")
    }

    /** A read or write passed the store's deadline (turned into [StoreTimeoutException] by [request]). */
    private class DeadlinePassed : RuntimeException(null, null, false, false)

    /**
     * Runs [body] under the lock, on [Dispatchers.IO], with this store's deadline; reconnects when
     * a cancelled or timed-out call dropped the connection.
     */
    private suspend fun <T> request(op: String, keys: List<String>, body: (ClientConnection, Long) -> T): T {
        keys.forEach(::checkKey)
        return lock.withLock {
            check(!closed) { "$this is closed" }
            lost?.let { throw StoreConnectionException("$it; connect again", op) }
            var c: ClientConnection? = null
            try {
                runInterruptible(Dispatchers.IO) {
                    val deadline = System.nanoTime() + timeout.inWholeNanoseconds
                    c = connection ?: openValidated(host, port, timeout, deadline, secret).also { connection = it }
                    body(c!!, deadline)
                }
            } catch (e: CancellationException) {
                drop(c)
                throw e
            } catch (e: DeadlinePassed) {
                drop(c)
                throw StoreTimeoutException("the store server at $address did not answer $op within $timeout; the connection was dropped", op, e)
            } catch (e: StoreTimeoutException) {
                if (!e.keepsConnection) drop(c)
                throw e
            } catch (e: ClientConnection.Closed) {
                drop(c)
                val reason = "${e.message} during $op"
                if (c != null) lost = reason
                throw StoreConnectionException(
                    "$reason: the server process ended, or it closed this connection after a request over its limits",
                    op,
                    e,
                )
            } catch (e: StoreException) {
                if (e is StoreConnectionException) {
                    drop(c)
                    lost = e.reason
                }
                throw e
            }
        }
    }

    private fun drop(c: ClientConnection?) {
        c?.close()
        if (connection === c) connection = null
    }

    public companion object {
        /** PyTorch's default store timeout (`kDefaultTimeout` in `c10d::Store`): 300 seconds. */
        public val DEFAULT_TIMEOUT: Duration = 300.seconds

        /** PyTorch's default port (`TCPStoreOptions::kDefaultPort`), also torchrun's `MASTER_PORT` default. */
        public const val DEFAULT_PORT: Int = StoreProtocol.DEFAULT_PORT

        /**
         * Connects to the store server at [host]:[port]: opens the connection, sends VALIDATE and
         * PING, and retries with exponential backoff and jitter (10 ms doubling to 1 s) while the
         * server refuses, until [timeout] (as PyTorch's client retries with its
         * `ExponentialBackoffWithJitter` until `opts.timeout`, `TCPStore::TCPStore`). [timeout] is
         * also every later call's default deadline. [secret] (opt-in): the shared secret of a
         * [TcpStoreServer] started with one, proved right after VALIDATE on every connection
         * (`AUTH`, an HMAC of the server's nonce); null for a server without one, such as
         * PyTorch's, which closes a connection that sends it.
         *
         * Cancellable.
         *
         * @throws StoreConnectionException naming the address and the last error when no server
         * answered within [timeout].
         */
        @JvmOverloads // keeps connect(host, port, timeout) of the API before the secret
        public suspend fun connect(host: String, port: Int = DEFAULT_PORT, timeout: Duration = DEFAULT_TIMEOUT, secret: ByteArray? = null): TcpStore {
            require(port in 1..65535) { "store port must be in 1..65535, got $port" }
            require(timeout.isPositive()) { "store timeout must be positive, got $timeout" }
            val key = StoreSecret.checked(secret, "TcpStore.connect")
            val c = runInterruptible(Dispatchers.IO) {
                openValidated(host, port, timeout, System.nanoTime() + timeout.inWholeNanoseconds, key)
            }
            return TcpStore(host, port, timeout, c, key)
        }

        /** Connect, VALIDATE and PING with retries until [deadline]. Blocking; interruptible. */
        private fun openValidated(host: String, port: Int, timeout: Duration, deadline: Long, secret: ByteArray?): ClientConnection {
            var pause = 10L
            var tries = 0
            var last: String? = null
            while (true) {
                tries++
                var c: ClientConnection? = null
                try {
                    c = ClientConnection.open(host, port, deadline)
                    if (c != null && secret != null && !prove(c, secret, deadline)) {
                        last = "it did not answer the secret's exchange in time"
                        c.close()
                        c = null
                    }
                    if (c != null) {
                        val nonce = ProcessHandle.current().pid().toInt()
                        val hello = (if (secret != null) RequestWriter() else RequestWriter().u8(StoreProtocol.VALIDATE).u32(StoreProtocol.VALIDATION_MAGIC))
                            .u8(StoreProtocol.PING).u32(nonce)
                        if (c.write(hello.toBuffer(), deadline) && c.fill(4, deadline)) {
                            val back = c.u32()
                            if (back == nonce) return c
                            last = "it answered PING $nonce with $back"
                        } else {
                            last = "it accepted the connection but did not answer PING"
                        }
                        c.close()
                    }
                } catch (e: ClientConnection.Closed) {
                    c?.close()
                    last = e.message + if (secret != null) {
                        " (this client proves a shared secret: a server with another secret, or none, such as PyTorch's, closes the connection)"
                    } else {
                        " (a tpcomm server started with a shared secret closes connections that do not prove it: set the same TPCOMM_STORE_SECRET)"
                    }
                }
                val left = deadline - System.nanoTime()
                if (left <= 0) {
                    throw StoreConnectionException(
                        "no store server answered at $host:$port within $timeout ($tries tries; last: ${last ?: "timed out"}); " +
                            "check that the process hosting it (rank 0, or torchrun's agent) is running and that MASTER_ADDR and MASTER_PORT name it",
                        "connect",
                    )
                }
                val jitter = ThreadLocalRandom.current().nextLong(pause / 2 + 1)
                Thread.sleep(minOf(pause + jitter, left / 1_000_000 + 1))
                pause = minOf(pause * 2, 1000L)
            }
        }

        /**
         * VALIDATE, then the secret's exchange ([StoreSecret]) on a new connection: false when the
         * deadline passed; [ClientConnection.Closed] when the server closed it (another secret, or none).
         */
        private fun prove(c: ClientConnection, secret: ByteArray, deadline: Long): Boolean {
            val hello = RequestWriter().u8(StoreProtocol.VALIDATE).u32(StoreProtocol.VALIDATION_MAGIC).u8(StoreSecret.AUTH).bytes(ByteArray(0))
            if (!c.write(hello.toBuffer(), deadline) || !c.fill(8, deadline)) return false
            val n = c.i64()
            if (n != StoreSecret.BYTES.toLong()) throw ClientConnection.Closed("the store server at ${c.address} answered the secret's exchange with $n bytes, not ${StoreSecret.BYTES}")
            if (!c.fill(StoreSecret.BYTES, deadline)) return false
            val nonce = c.take(StoreSecret.BYTES)
            val answer = RequestWriter().u8(StoreSecret.AUTH).bytes(StoreSecret.answer(secret, nonce))
            if (!c.write(answer.toBuffer(), deadline) || !c.fill(1, deadline)) return false
            val ok = c.u8()
            if (ok != 0) throw ClientConnection.Closed("the store server at ${c.address} refused this client's secret ($ok)")
            return true
        }
    }
}
