package dev.tpcomm.store

import java.io.IOException
import java.net.InetAddress
import java.net.InetSocketAddress
import java.net.StandardSocketOptions
import java.nio.channels.SelectionKey
import java.nio.channels.Selector
import java.nio.channels.ServerSocketChannel
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger

/**
 * An embeddable store server that speaks PyTorch's TCPStore protocol: PyTorch's clients
 * (`torch.distributed.TCPStore(..., is_master=False)`, `init_process_group("env://")`) and tpcomm's
 * [TcpStore] use it as they would PyTorch's libuv server (pytorch/pytorch,
 * `torch/csrc/distributed/c10d/store/TCPStoreLibUvBackend.cpp`, `LibUVStoreDaemon`).
 *
 * One thread (a daemon named `tpcomm-store-<port>`) serves every connection through a
 * `java.nio` selector: no native code, no thread per client, thousands of clients at once. The
 * server keeps PyTorch's limits: a key over 8 KiB, a value over 8 MiB, more than 128 Ki keys in
 * one request, an unknown command, or a first request that is not VALIDATE with the magic number
 * close that one connection and nothing else (PyTorch's server closes it too, except that it
 * leaves a first request with a wrong magic unanswered until the client sends more). The data
 * lives in this process's memory and ends with [close].
 *
 * Thread-safe: [close] and the properties may be called from any thread.
 */
public class TcpStoreServer private constructor(
    private val server: ServerSocketChannel,
    private val selector: Selector,
    /** The port the server listens on (the one chosen by the system when 0 was asked for). */
    public val port: Int,
    /** The address the server is bound to (the wildcard address when it listens on every interface). */
    public val boundAddress: InetAddress,
    private val secret: ByteArray?,
) : AutoCloseable {
    /** Whether clients must prove the shared secret ([start]'s `secret`) before anything else. */
    public val hasSecret: Boolean get() = secret != null

    private val state = StoreServerState()
    private val connections = HashSet<ServerConnection>()
    private val open = AtomicInteger()
    private val stopped = CountDownLatch(1)

    @Volatile private var closing = false

    private val thread = Thread(::loop, "tpcomm-store-$port").apply { isDaemon = true }

    /** How many client connections are open now. */
    public val connectionCount: Int get() = open.get()

    /** Whether the server still serves (false once [close] was called or its thread failed). */
    public val isRunning: Boolean get() = !closing && thread.isAlive

    private fun loop() {
        try {
            while (!closing) {
                selector.select()
                val ready = selector.selectedKeys().iterator()
                while (ready.hasNext()) {
                    val k = ready.next()
                    ready.remove()
                    if (!k.isValid) continue
                    if (k.isAcceptable) {
                        accept()
                        continue
                    }
                    val c = k.attachment() as ServerConnection
                    if (k.isWritable) c.onWritable()
                    if (!c.closed && k.isValid && k.isReadable) c.onReadable()
                }
            }
        } catch (e: Throwable) {
            if (!closing) System.err.println("tpcomm store server on port $port stopped: $e")
        } finally {
            connections.toList().forEach { it.close() }
            runCatching { server.close() }
            runCatching { selector.close() }
            stopped.countDown()
        }
    }

    private fun accept() {
        while (true) {
            val ch = try {
                server.accept()
            } catch (_: IOException) {
                null // out of file descriptors, or the client gave up: the others go on
            } ?: return
            try {
                ch.configureBlocking(false)
                ch.setOption(StandardSocketOptions.TCP_NODELAY, true)
                val key = ch.register(selector, SelectionKey.OP_READ)
                val c = ServerConnection(ch, key, state, secret) { closed ->
                    connections.remove(closed)
                    state.clearWaitState(closed)
                    open.decrementAndGet()
                }
                key.attach(c)
                connections.add(c)
                open.incrementAndGet()
            } catch (_: IOException) {
                runCatching { ch.close() }
            }
        }
    }

    /**
     * Stops serving: closes every connection (their clients get [StoreConnectionException]) and
     * the listening socket, and waits up to 5 seconds for the server's thread to end. Idempotent.
     */
    override fun close() {
        closing = true
        runCatching { selector.wakeup() }
        if (Thread.currentThread() !== thread) stopped.await(5, TimeUnit.SECONDS)
    }

    override fun toString(): String = "TcpStoreServer(${boundAddress.hostAddress}:$port, $connectionCount connections)"

    public companion object {
        /**
         * Starts a server listening on [port] (0: a free port, see [TcpStoreServer.port]) of [host]
         * (null: every interface, as PyTorch's server binds `::` or `0.0.0.0`; a name or address:
         * that interface only, e.g. the one `MASTER_ADDR` names). [backlog] is the listen queue
         * (PyTorch's libuv server asks for the system's maximum, `somaxconn`; the default here too
         * is high enough for thousands of clients connecting at once, within `somaxconn`).
         * [secret] (opt-in, null by default): clients must prove it right after VALIDATE (a
         * tpcomm extension, `AUTH`: an HMAC-SHA256 of a nonce; the secret never crosses the wire),
         * so only tpcomm clients given the same secret ([TcpStore.connect]) are served; PyTorch's
         * clients, which have no secret, are closed. It authenticates, it does not encrypt.
         *
         * @throws StoreException naming the port when it cannot listen there (another process has
         * it: pick another port, or end that process).
         */
        @JvmStatic
        @JvmOverloads
        public fun start(port: Int = StoreProtocol.DEFAULT_PORT, host: String? = null, backlog: Int = 4096, secret: ByteArray? = null): TcpStoreServer {
            require(port in 0..65535) { "store port must be in 0..65535, got $port" }
            val key = StoreSecret.checked(secret, "TcpStoreServer.start")
            val server = ServerSocketChannel.open()
            val selector: Selector
            try {
                server.setOption(StandardSocketOptions.SO_REUSEADDR, true)
                val address = if (host == null) InetSocketAddress(port) else InetSocketAddress(host, port)
                if (address.isUnresolved) throw StoreException("cannot start a store server on $host:$port: the host name does not resolve", "listen")
                server.bind(address, backlog)
                server.configureBlocking(false)
                selector = Selector.open()
                server.register(selector, SelectionKey.OP_ACCEPT)
            } catch (e: IOException) {
                runCatching { server.close() }
                throw StoreException(
                    "cannot start a store server on ${host ?: "every interface"}, port $port: ${e.message}; " +
                        "another process may be listening there (a store left from an earlier job, or PyTorch's): choose another port (MASTER_PORT) or end that process",
                    "listen",
                    e,
                )
            } catch (e: StoreException) {
                runCatching { server.close() }
                throw e
            }
            val local = server.localAddress as InetSocketAddress
            val s = TcpStoreServer(server, selector, local.port, local.address, key)
            s.thread.start()
            return s
        }
    }
}
