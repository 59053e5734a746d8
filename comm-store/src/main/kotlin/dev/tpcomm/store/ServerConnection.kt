package dev.tpcomm.store

import java.io.IOException
import java.nio.ByteBuffer
import java.nio.channels.SelectionKey
import java.nio.channels.SocketChannel

/**
 * One client connection of a [TcpStoreServer], used only by its selector thread. Bytes are
 * gathered until a whole request is there, then parsed and answered as `UvClient::processBuf` and
 * its `parse_*_command` functions do (pytorch/pytorch,
 * `torch/csrc/distributed/c10d/store/TCPStoreLibUvBackend.cpp`): a length over a limit ends the
 * connection as soon as the length arrives (`ChunkedStream::read_key`/`read_payload`), before the
 * bytes it announces, so an oversized request never fills the server's memory.
 */
internal class ServerConnection(
    private val channel: SocketChannel,
    val key: SelectionKey,
    private val state: StoreServerState,
    /** The server's shared secret ([StoreSecret]), or null: then nothing is asked after VALIDATE. */
    private val secret: ByteArray? = null,
    private val onClose: (ServerConnection) -> Unit,
) {
    /** The nonce sent in answer to the first [StoreSecret.AUTH], until the client's answer matched. */
    private var nonce: ByteArray? = null

    /** Whether the client proved the secret (always true without one). */
    private var authenticated = secret == null
    private var buf = ByteArray(4096)
    private var start = 0
    private var end = 0
    private var validated = false
    private val outbound = ArrayDeque<ByteBuffer>()
    var closed: Boolean = false
        private set

    /**
     * Reads what the channel has and answers every complete request; at most 16 reads per call, so
     * a client that streams without pause cannot keep the selector from the others.
     */
    fun onReadable() {
        var reads = 0
        while (!closed && reads++ < 16) {
            if (end == buf.size) {
                if (start > 0) {
                    System.arraycopy(buf, start, buf, 0, end - start)
                    end -= start
                    start = 0
                } else {
                    buf = buf.copyOf(buf.size * 2)
                }
            }
            val n = try {
                channel.read(ByteBuffer.wrap(buf, end, buf.size - end))
            } catch (_: IOException) {
                -1
            }
            if (n < 0) {
                close()
                return
            }
            if (n == 0) break
            end += n
            try {
                process()
            } catch (_: ProtocolViolation) {
                close()
                return
            } catch (_: ArithmeticException) {
                close()
                return
            }
        }
        if (!closed && end == start && buf.size > 64 * 1024) {
            buf = ByteArray(4096) // a large request was answered: give its buffer back
            start = 0
            end = 0
        }
    }

    /** Writes what is queued; called when the channel can take more. */
    fun onWritable() = flush()

    /** Queues [w] for this client and writes what the channel takes now. */
    fun send(w: RequestWriter) {
        if (closed) return
        outbound.addLast(w.toBuffer())
        flush()
    }

    private fun flush() {
        try {
            while (outbound.isNotEmpty()) {
                val b = outbound.first()
                channel.write(b)
                if (b.hasRemaining()) break
                outbound.removeFirst()
            }
        } catch (_: IOException) {
            close()
            return
        }
        if (!closed && key.isValid) {
            key.interestOps(if (outbound.isEmpty()) SelectionKey.OP_READ else SelectionKey.OP_READ or SelectionKey.OP_WRITE)
        }
    }

    fun close() {
        if (closed) return
        closed = true
        outbound.clear()
        key.cancel()
        runCatching { channel.close() }
        onClose(this)
    }

    // ---- parsing: each parse returns false when the request is not complete yet ----

    private var pos = 0

    private fun available() = end - pos

    private fun u8(): Int? = if (available() >= 1) buf[pos++].toInt() and 0xff else null

    private fun u32(): Int? {
        if (available() < 4) return null
        var v = 0
        for (i in 0 until 4) v = v or ((buf[pos + i].toInt() and 0xff) shl (8 * i))
        pos += 4
        return v
    }

    private fun i64(): Long? {
        if (available() < 8) return null
        var v = 0L
        for (i in 0 until 8) v = v or ((buf[pos + i].toLong() and 0xff) shl (8 * i))
        pos += 8
        return v
    }

    /** `ChunkedStream::read_key`: a length over `MAX_STRING_LEN` is a violation at once. */
    private fun key(): String? {
        val n = i64() ?: return null
        if (n < 0 || n > StoreProtocol.MAX_KEY_BYTES) {
            throw ProtocolViolation("key of ${java.lang.Long.toUnsignedString(n)} bytes (max ${StoreProtocol.MAX_KEY_BYTES})")
        }
        if (available() < n) return null
        val s = String(buf, pos, n.toInt(), Charsets.ISO_8859_1)
        pos += n.toInt()
        return s
    }

    /** `ChunkedStream::read_payload`: a length over `MAX_PAYLOAD_LEN` is a violation at once. */
    private fun payload(): ByteArray? {
        val n = i64() ?: return null
        if (n < 0 || n > StoreProtocol.MAX_VALUE_BYTES) {
            throw ProtocolViolation("value of ${java.lang.Long.toUnsignedString(n)} bytes (max ${StoreProtocol.MAX_VALUE_BYTES})")
        }
        if (available() < n) return null
        val v = buf.copyOfRange(pos, pos + n.toInt())
        pos += n.toInt()
        return v
    }

    /** A key count as CHECK, WAIT, MULTI_GET and MULTI_SET read it, checked against `MAX_KEY_COUNT`. */
    private fun count(): Long? {
        val n = i64() ?: return null
        if (n < 0 || n > StoreProtocol.MAX_KEY_COUNT) throw ProtocolViolation("${java.lang.Long.toUnsignedString(n)} keys (max ${StoreProtocol.MAX_KEY_COUNT})")
        return n
    }

    private fun keys(n: Long): List<String>? {
        val out = ArrayList<String>(n.toInt())
        repeat(n.toInt()) { out.add(key() ?: return null) }
        return out
    }

    /**
     * Answers every complete request in the buffer (`UvClient::processBuf`'s loop: parse from the
     * last committed byte, answer, commit).
     */
    private fun process() {
        while (!closed) {
            pos = start
            val code = u8() ?: return
            val done = if (!validated) {
                // The first request must be VALIDATE with the magic number. PyTorch's server checks
                // only the first request this way (isMiscellaneousClient), and one that is not a
                // VALIDATE with the right magic leaves it unanswered until its next bytes arrive,
                // which it then reads as an unknown command (VALIDATE, 0, is not one after the first
                // request) and closes the connection; this server closes it at once.
                if (code != StoreProtocol.VALIDATE) throw ProtocolViolation("first request is $code, not VALIDATE")
                val magic = u32() ?: return
                if (magic != StoreProtocol.VALIDATION_MAGIC) throw ProtocolViolation("wrong validation magic")
                validated = true
                true
            } else if (!authenticated) {
                authenticate(code)
            } else {
                handle(code)
            }
            if (!done) return
            start = pos
            if (start == end) {
                start = 0
                end = 0
            }
        }
    }

    /**
     * The secret's exchange ([StoreSecret]): the first [StoreSecret.AUTH] gets a nonce, the second
     * must carry the HMAC of it. Anything else, or a wrong answer, closes the connection. False
     * when the request is incomplete.
     */
    private fun authenticate(code: Int): Boolean {
        if (code != StoreSecret.AUTH) throw ProtocolViolation("this store has a shared secret, and the client sent $code before proving it")
        val value = payload() ?: return false
        val sent = nonce
        if (sent == null) {
            nonce = StoreSecret.nonce().also { send(RequestWriter().bytes(it)) }
            return true
        }
        if (!StoreSecret.matches(secret!!, sent, value)) throw ProtocolViolation("wrong answer to the store's secret")
        authenticated = true
        nonce = null
        send(RequestWriter(1).u8(0))
        return true
    }

    /** One request after VALIDATE; false when incomplete. Unknown codes close the connection (`default:` in processBuf). */
    private fun handle(code: Int): Boolean {
        when (code) {
            StoreProtocol.PING -> {
                val nonce = u32() ?: return false
                send(RequestWriter(4).u32(nonce))
            }
            StoreProtocol.SET -> {
                val k = key() ?: return false
                val v = payload() ?: return false
                state.set(k, v)
            }
            StoreProtocol.COMPARE_SET -> {
                val k = key() ?: return false
                val expected = payload() ?: return false
                val desired = payload() ?: return false
                send(RequestWriter().bytes(state.compareSet(k, expected, desired)))
            }
            StoreProtocol.GET -> {
                val k = key() ?: return false
                send(RequestWriter().bytes(state.get(k)))
            }
            StoreProtocol.ADD -> {
                val k = key() ?: return false
                val delta = i64() ?: return false
                send(RequestWriter(8).i64(state.add(k, delta)))
            }
            StoreProtocol.CHECK -> {
                val n = count() ?: return false
                val ks = keys(n) ?: return false
                send(RequestWriter(1).u8(if (state.check(ks)) StoreProtocol.CHECK_READY else StoreProtocol.CHECK_NOT_READY))
            }
            StoreProtocol.WAIT -> {
                val n = count() ?: return false
                val ks = keys(n) ?: return false
                if (state.waitKeys(ks, this)) send(RequestWriter(1).u8(StoreProtocol.STOP_WAITING))
            }
            StoreProtocol.GETNUMKEYS -> send(RequestWriter(8).i64(state.size.toLong()))
            StoreProtocol.DELETE_KEY -> {
                val k = key() ?: return false
                send(RequestWriter(8).i64(state.delete(k)))
            }
            StoreProtocol.APPEND -> {
                val k = key() ?: return false
                val v = payload() ?: return false
                state.append(k, v)
            }
            StoreProtocol.MULTI_GET -> {
                val n = count() ?: return false
                val ks = keys(n) ?: return false
                val w = RequestWriter()
                ks.forEach { w.bytes(state.get(it)) }
                send(w)
            }
            StoreProtocol.MULTI_SET -> {
                // PyTorch's parse_multi_set_command sets each pair as it parses it, so a request cut
                // short may have set some keys already when it is parsed again; this server parses
                // the whole request first, then sets every pair, so the outcome is the same.
                val n = count() ?: return false
                val pairs = ArrayList<Pair<String, ByteArray>>(n.toInt())
                repeat(n.toInt()) {
                    val k = key() ?: return false
                    val v = payload() ?: return false
                    pairs.add(k to v)
                }
                pairs.forEach { (k, v) -> state.set(k, v) }
            }
            StoreProtocol.CANCEL_WAIT -> {
                state.clearWaitState(this)
                send(RequestWriter(1).u8(StoreProtocol.WAIT_CANCELED))
            }
            StoreProtocol.QUEUE_PUSH -> {
                val k = key() ?: return false
                val v = payload() ?: return false
                state.queuePush(k, v)
            }
            StoreProtocol.QUEUE_POP -> {
                val k = key() ?: return false
                val w = RequestWriter()
                state.queuePop(k, w)
                send(w)
            }
            StoreProtocol.QUEUE_LEN -> {
                val k = key() ?: return false
                send(RequestWriter(8).i64(state.queueLen(k)))
            }
            StoreProtocol.LIST_KEYS -> {
                val keys = state.keys()
                val w = RequestWriter().i64(keys.size.toLong())
                keys.forEach { w.bytes(it.toByteArray(Charsets.ISO_8859_1)) }
                send(w)
            }
            StoreProtocol.BARRIER -> {
                val k = key() ?: return false
                val worldSize = i64() ?: return false
                if (state.barrier(k, worldSize, this)) send(RequestWriter(1).u8(StoreProtocol.STOP_WAITING))
            }
            else -> throw ProtocolViolation("unknown command $code")
        }
        return true
    }
}
