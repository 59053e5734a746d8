package dev.tpcomm.store

import java.io.IOException
import java.net.InetSocketAddress
import java.net.StandardSocketOptions
import java.nio.ByteBuffer
import java.nio.channels.SelectionKey
import java.nio.channels.Selector
import java.nio.channels.SocketChannel

/**
 * One TCP connection of a [TcpStore] client: a non-blocking channel with its own selector, so
 * every read and write waits with a deadline (a `select` with the time left) and an interrupt
 * (from `runInterruptible`, on cancellation) wakes it. Used by one caller at a time (the client's
 * lock); the caller runs on a thread that may block.
 */
internal class ClientConnection private constructor(
    private val channel: SocketChannel,
    private val selector: Selector,
    val address: String,
) : AutoCloseable {
    private val key: SelectionKey = channel.register(selector, 0)
    private var inbound = ByteArray(4096)
    private var start = 0
    private var end = 0

    /** The peer closed the connection (EOF or reset). */
    class Closed(message: String, cause: Throwable? = null) : IOException(message, cause)

    /** Writes all of [buf] before [deadline] (System.nanoTime); false if the deadline passed first. */
    fun write(buf: ByteBuffer, deadline: Long): Boolean {
        while (buf.hasRemaining()) {
            val n = try {
                channel.write(buf)
            } catch (e: IOException) {
                throw Closed("the store server at $address closed the connection (${e.message})", e)
            }
            if (n == 0 && !await(SelectionKey.OP_WRITE, deadline)) return false
        }
        return true
    }

    /** Makes [n] bytes available to the next reads before [deadline]; false if it passed first. */
    fun fill(n: Int, deadline: Long): Boolean {
        while (end - start < n) {
            if (inbound.size - start < n) {
                val bigger = if (inbound.size >= n) inbound else ByteArray(maxOf(n, inbound.size * 2))
                System.arraycopy(inbound, start, bigger, 0, end - start)
                inbound = bigger
                end -= start
                start = 0
            } else if (end == inbound.size) {
                System.arraycopy(inbound, start, inbound, 0, end - start)
                end -= start
                start = 0
            }
            val r = try {
                channel.read(ByteBuffer.wrap(inbound, end, inbound.size - end))
            } catch (e: IOException) {
                throw Closed("the store server at $address closed the connection (${e.message})", e)
            }
            if (r < 0) throw Closed("the store server at $address closed the connection")
            if (r == 0 && !await(SelectionKey.OP_READ, deadline)) return false
            end += r
        }
        return true
    }

    fun u8(): Int = inbound[start++].toInt() and 0xff

    fun u32(): Int {
        var v = 0
        for (i in 0 until 4) v = v or ((inbound[start + i].toInt() and 0xff) shl (8 * i))
        start += 4
        return v
    }

    fun i64(): Long {
        var v = 0L
        for (i in 0 until 8) v = v or ((inbound[start + i].toLong() and 0xff) shl (8 * i))
        start += 8
        return v
    }

    fun take(n: Int): ByteArray {
        val out = inbound.copyOfRange(start, start + n)
        start += n
        return out
    }

    /** Waits until [op] is ready or [deadline]; false on the deadline. Interrupts end it with InterruptedException. */
    private fun await(op: Int, deadline: Long): Boolean {
        while (true) {
            if (Thread.interrupted()) throw InterruptedException("store call cancelled")
            val left = deadline - System.nanoTime()
            if (left <= 0) return false
            val ready = try {
                key.interestOps(op)
                selector.selectedKeys().clear()
                selector.select(maxOf(1L, (left + 999_999) / 1_000_000)).also { key.interestOps(0) }
            } catch (e: java.nio.channels.ClosedSelectorException) {
                throw Closed("the store client for $address was closed", e)
            } catch (e: java.nio.channels.CancelledKeyException) {
                throw Closed("the store client for $address was closed", e)
            }
            if (Thread.interrupted()) throw InterruptedException("store call cancelled")
            if (ready > 0) return true
        }
    }

    override fun close() {
        runCatching { selector.close() }
        runCatching { channel.close() }
    }

    companion object {
        /**
         * Opens a connection to [host]:[port] before [deadline], or throws: [Closed] when refused
         * or reset, null when the deadline passed.
         */
        fun open(host: String, port: Int, deadline: Long): ClientConnection? {
            val channel = SocketChannel.open()
            var selector: Selector? = null
            try {
                channel.configureBlocking(false)
                channel.setOption(StandardSocketOptions.TCP_NODELAY, true)
                selector = Selector.open()
                val address = "$host:$port"
                val connected = try {
                    channel.connect(InetSocketAddress(host, port))
                } catch (e: IOException) {
                    throw Closed("cannot connect to the store server at $address (${e.message})", e)
                } catch (e: java.nio.channels.UnresolvedAddressException) {
                    throw Closed("cannot connect to the store server at $address: the host name does not resolve", e)
                }
                if (!connected) {
                    val k = channel.register(selector, SelectionKey.OP_CONNECT)
                    while (true) {
                        if (Thread.interrupted()) throw InterruptedException("store connect cancelled")
                        val left = deadline - System.nanoTime()
                        if (left <= 0) {
                            channel.close(); selector.close()
                            return null
                        }
                        selector.select(maxOf(1L, (left + 999_999) / 1_000_000))
                        if (Thread.interrupted()) throw InterruptedException("store connect cancelled")
                        val done = try {
                            channel.finishConnect()
                        } catch (e: IOException) {
                            throw Closed("cannot connect to the store server at $address (${e.message})", e)
                        }
                        if (done) break
                    }
                    k.cancel()
                    selector.selectNow()
                }
                return ClientConnection(channel, selector, address)
            } catch (t: Throwable) {
                runCatching { selector?.close() }
                runCatching { channel.close() }
                throw t
            }
        }
    }
}
