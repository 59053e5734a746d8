package dev.tpcomm.store

/**
 * The data of a [TcpStoreServer], used only by its selector thread (no locks). Each operation is
 * `LibUVStoreDaemon`'s of the same name (pytorch/pytorch,
 * `torch/csrc/distributed/c10d/store/TCPStoreLibUvBackend.cpp`), with its quirks kept so that
 * clients see what PyTorch's server would answer. Keys are held as ISO-8859-1 strings: one char per
 * byte, so any key bytes a client sends come back unchanged (LIST_KEYS).
 */
internal class StoreServerState {
    private val data = HashMap<String, ByteArray>()

    /** `waitingSockets_`: key -> the connections waiting for it. */
    private val waiting = HashMap<String, MutableList<ServerConnection>>()

    /** `keysAwaited_`: connection -> how many of its keys are still missing. */
    private val awaited = HashMap<ServerConnection, Int>()

    private val queues = HashMap<String, ArrayDeque<ByteArray>>()

    val size: Int get() = data.size

    /** `LibUVStoreDaemon::set`. */
    fun set(key: String, value: ByteArray) {
        data[key] = value
        wakeAll(key)
    }

    /** `LibUVStoreDaemon::compareAndSet`, its answers for a missing key included. */
    fun compareSet(key: String, expected: ByteArray, desired: ByteArray): ByteArray {
        val now = data[key]
        if (now == null) {
            if (expected.isEmpty()) {
                data[key] = desired
                wakeAll(key)
                return desired
            }
            wakeAll(key)
            return expected
        }
        if (now.contentEquals(expected)) data[key] = desired
        wakeAll(key)
        return data.getValue(key)
    }

    /** `LibUVStoreDaemon::get`: empty when missing. */
    fun get(key: String): ByteArray = data[key] ?: EMPTY

    /**
     * `LibUVStoreDaemon::add`: the old value parsed as `std::stoll` parses it, the sum stored as
     * ASCII decimal.
     *
     * @throws ProtocolViolation when the old value is not a number (PyTorch's `stoll` throws and the
     * connection is closed).
     */
    fun add(key: String, delta: Long): Long {
        var sum = delta
        data[key]?.let { old ->
            val parsed = stoll(old) ?: throw ProtocolViolation("ADD to key '$key', whose value is not a decimal number")
            sum = Math.addExact(sum, parsed)
        }
        data[key] = sum.toString().toByteArray(Charsets.US_ASCII)
        wakeAll(key)
        return sum
    }

    /** `LibUVStoreDaemon::checkKeys`: a key counts as present when set, or a non-empty queue. */
    fun check(keys: List<String>): Boolean = keys.all { data.containsKey(it) || queues[it]?.isNotEmpty() == true }

    /** `LibUVStoreDaemon::waitKeys`: true when the keys are present now; else [client] waits. */
    fun waitKeys(keys: List<String>, client: ServerConnection): Boolean {
        if (check(keys)) return true
        var missing = 0
        for (k in keys) {
            if (!data.containsKey(k)) {
                waiting.getOrPut(k) { ArrayList() }.add(client)
                missing++
            }
        }
        awaited[client] = missing
        return false
    }

    /** `LibUVStoreDaemon::deleteKey`: 1 or 0; waiters are not woken. */
    fun delete(key: String): Long = if (data.remove(key) != null) 1 else 0

    /** `LibUVStoreDaemon::append`. */
    fun append(key: String, value: ByteArray) {
        val old = data[key]
        data[key] = if (old == null) value else old + value
        wakeAll(key)
    }

    /** `LibUVStoreDaemon::queuePush`: wakes one waiter. */
    fun queuePush(key: String, value: ByteArray) {
        queues.getOrPut(key) { ArrayDeque() }.addLast(value)
        wakeOne(key)
    }

    /** `LibUVStoreDaemon::queuePop`: the queue's length before the pop, then the value if there was one. */
    fun queuePop(key: String, reply: RequestWriter) {
        val q = queues.getOrPut(key) { ArrayDeque() }
        reply.i64(q.size.toLong())
        if (q.isNotEmpty()) reply.bytes(q.removeFirst())
    }

    fun queueLen(key: String): Long = queues[key]?.size?.toLong() ?: 0L

    fun keys(): Collection<String> = data.keys

    /** `LibUVStoreDaemon::barrier` (the newest servers; not in PyTorch 2.10). */
    fun barrier(key: String, worldSize: Long, client: ServerConnection): Boolean {
        var count = 1L
        data[key]?.let { count = (stoll(it) ?: throw ProtocolViolation("BARRIER on key '$key', whose value is not a decimal number")) + 1 }
        data[key] = count.toString().toByteArray(Charsets.US_ASCII)
        if (count >= worldSize) {
            wakeAll(key)
            return true
        }
        waiting.getOrPut(key) { ArrayList() }.add(client)
        awaited[client] = 1
        return false
    }

    /** `LibUVStoreDaemon::clearClientWaitState` (CANCEL_WAIT, and a connection that closed). */
    fun clearWaitState(client: ServerConnection) {
        if (awaited.remove(client) == null) return
        val it = waiting.entries.iterator()
        while (it.hasNext()) {
            val e = it.next()
            e.value.removeAll { c -> c === client }
            if (e.value.isEmpty()) it.remove()
        }
    }

    /** `LibUVStoreDaemon::wakeupWaitingClients`. */
    private fun wakeAll(key: String) {
        val list = waiting.remove(key) ?: return
        for (c in list) {
            val left = (awaited[c] ?: 0) - 1
            awaited[c] = left
            if (left == 0) c.send(RequestWriter(1).u8(StoreProtocol.STOP_WAITING))
        }
    }

    /** `LibUVStoreDaemon::wakeupOneWaitingClient` (which leaves the list in place, as PyTorch's does). */
    private fun wakeOne(key: String) {
        val list = waiting[key] ?: return
        for (c in list) {
            val left = (awaited[c] ?: 0) - 1
            awaited[c] = left
            if (left == 0) {
                c.send(RequestWriter(1).u8(StoreProtocol.STOP_WAITING))
                return
            }
        }
    }

    companion object {
        val EMPTY = ByteArray(0)

        /**
         * `std::stoll` on the bytes: leading white space, an optional sign, decimal digits up to
         * the first other byte; null when there are no digits or the number overflows.
         */
        fun stoll(bytes: ByteArray): Long? {
            var i = 0
            while (i < bytes.size && bytes[i].toInt().toChar() in " \t\n\u000B\u000C\r") i++
            var negative = false
            if (i < bytes.size && (bytes[i] == '+'.code.toByte() || bytes[i] == '-'.code.toByte())) {
                negative = bytes[i] == '-'.code.toByte()
                i++
            }
            val from = i
            var v = 0L
            while (i < bytes.size && bytes[i] in '0'.code.toByte()..'9'.code.toByte()) {
                val d = bytes[i] - '0'.code.toByte()
                v = try {
                    Math.addExact(Math.multiplyExact(v, 10L), if (negative) -d.toLong() else d.toLong())
                } catch (_: ArithmeticException) {
                    return null
                }
                i++
            }
            return if (i == from) null else v
        }
    }
}

/** A request that PyTorch's server answers by closing the connection (a limit, an unknown code, a bad ADD). */
internal class ProtocolViolation(message: String) : RuntimeException(message, null, false, false)
