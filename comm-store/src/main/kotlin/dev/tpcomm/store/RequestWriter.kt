package dev.tpcomm.store

import java.nio.ByteBuffer
import java.nio.ByteOrder

/**
 * Builds one request or reply as PyTorch's `SendBuffer` (TCPStore.cpp, client) and `StreamWriter`
 * (TCPStoreLibUvBackend.cpp, server) do: little-endian integers, strings and byte arrays as a u64
 * length and the raw bytes. Not thread-safe; one per message.
 */
internal class RequestWriter(initial: Int = 64) {
    private var buf: ByteArray = ByteArray(initial)
    private var size = 0

    private fun ensure(extra: Int) {
        val need = size + extra
        if (need > buf.size) buf = buf.copyOf(maxOf(need, buf.size * 2))
    }

    fun u8(v: Int): RequestWriter = apply {
        ensure(1)
        buf[size++] = v.toByte()
    }

    fun u32(v: Int): RequestWriter = apply {
        ensure(4)
        for (i in 0 until 4) buf[size++] = (v ushr (8 * i)).toByte()
    }

    fun i64(v: Long): RequestWriter = apply {
        ensure(8)
        for (i in 0 until 8) buf[size++] = (v ushr (8 * i)).toByte()
    }

    fun bytes(v: ByteArray): RequestWriter = apply {
        i64(v.size.toLong())
        ensure(v.size)
        System.arraycopy(v, 0, buf, size, v.size)
        size += v.size
    }

    fun toBuffer(): ByteBuffer = ByteBuffer.wrap(buf, 0, size).order(ByteOrder.LITTLE_ENDIAN)

    val length: Int get() = size
}
