package dev.tpcomm.store

import java.io.DataInputStream
import java.net.InetSocketAddress
import java.net.Socket
import java.net.SocketTimeoutException
import java.nio.ByteBuffer
import java.nio.ByteOrder

/**
 * A test client that writes bytes as given, to check the server byte by byte (what PyTorch's client
 * would send, and what no client should).
 */
internal class RawClient(port: Int, host: String = "127.0.0.1") : AutoCloseable {
    val socket = Socket().apply {
        tcpNoDelay = true
        connect(InetSocketAddress(host, port), 5000)
        soTimeout = 5000
    }
    private val input = DataInputStream(socket.getInputStream())

    fun send(bytes: ByteArray) {
        socket.getOutputStream().write(bytes)
        socket.getOutputStream().flush()
    }

    fun validate() = send(msg { u8(0); u32(0x3C85F7CE) })

    fun readU8(): Int = input.readUnsignedByte()
    fun readI64(): Long = ByteBuffer.wrap(input.readNBytes(8)).order(ByteOrder.LITTLE_ENDIAN).long
    fun readU32(): Int = ByteBuffer.wrap(input.readNBytes(4)).order(ByteOrder.LITTLE_ENDIAN).int
    fun readBytes(): ByteArray = input.readNBytes(readI64().toInt())

    /** True when the server closed the connection (EOF or reset) within [millis]. */
    fun closedWithin(millis: Int): Boolean {
        socket.soTimeout = millis
        return try {
            input.read() < 0
        } catch (_: SocketTimeoutException) {
            false
        } catch (_: java.io.IOException) {
            true
        }
    }

    override fun close() = socket.close()

    companion object {
        fun msg(build: RequestWriter.() -> Unit): ByteArray {
            val w = RequestWriter().apply(build)
            val b = w.toBuffer()
            return ByteArray(b.remaining()).also { b.get(it) }
        }
        fun RequestWriter.str(s: String) = bytes(s.toByteArray())
    }
}
