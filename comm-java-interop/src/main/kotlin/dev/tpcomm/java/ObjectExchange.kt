package dev.tpcomm.java

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

/**
 * The object collectives of [JavaCommunicator] on top of byte tensors, with any [ObjectCodec].
 *
 * Wire format, the same as comm-api's `ObjectCollectives` whenever every codec succeeds: an Int64
 * length per rank (allGather, or broadcast from the root), then the payloads (allGather of UInt8
 * tensors padded to the longest, or broadcast of the root's). A rank whose value could not be
 * encoded sends a negative length `-(1 + m)` and, as its payload, `m` bytes: one byte saying what
 * failed ([CODEC] or [BAD_ARGUMENT]) and the UTF-8 description. Every rank sees every length, so all
 * take the same path and all throw the same failure: nobody waits for a value that never comes.
 */
internal object ObjectExchange {
    private const val CODEC: Byte = 0
    private const val BAD_ARGUMENT: Byte = 1
    private const val MAX_MESSAGE_BYTES = 4096

    /** What this rank contributes: its encoded value, or why there is none. */
    private class Encoded(val bytes: ByteArray?, val kind: Byte, val error: Throwable?) {
        /** The payload on the wire. */
        val payload: ByteArray = bytes ?: run {
            val text = (if (kind == BAD_ARGUMENT) error?.message else error?.let(::describe)) ?: "unknown failure"
            byteArrayOf(kind) + text.encodeToByteArray().let { if (it.size > MAX_MESSAGE_BYTES) it.copyOf(MAX_MESSAGE_BYTES) else it }
        }
        val header: Long get() = if (bytes != null) bytes.size.toLong() else -(1L + payload.size)
    }

    private fun describe(e: Throwable): String = "${e.javaClass.name}: ${e.message}"

    private fun <T> encode(codec: ObjectCodec<T>, value: T): Encoded = try {
        @Suppress("USELESS_CAST", "KotlinConstantConditions")
        val bytes = codec.encode(value) as ByteArray?
        if (bytes == null) Encoded(null, CODEC, NullPointerException("$codec returned null from encode")) else Encoded(bytes, CODEC, null)
    } catch (e: Exception) {
        Encoded(null, CODEC, e)
    }

    private fun payloadLength(header: Long): Long = if (header >= 0) header else -(header + 1)

    private fun bytesOf(t: Tensor, offset: Long, length: Int): ByteArray {
        val out = ByteArray(length)
        MemorySegment.copy(t.segment, ValueLayout.JAVA_BYTE, offset, out, 0, length)
        return out
    }

    private fun <T> decode(operation: String, codec: ObjectCodec<T>, rank: Int, bytes: ByteArray): T = try {
        codec.decode(bytes)
    } catch (e: Exception) {
        throw ObjectCodecException(
            "$operation: the codec could not decode the value of rank $rank (${bytes.size} bytes): ${describe(e)}. " +
                "Every rank decodes the same bytes; the collective completed and the communicator is still usable.",
            listOf(rank), e,
        )
    }

    /** The failure every rank throws when [failed] (rank to its wire payload) is not empty. */
    private fun failure(operation: String, failed: Map<Int, ByteArray>, mine: Encoded, myRank: Int): RuntimeException {
        val badArgument = failed.values.firstOrNull { it.isNotEmpty() && it[0] == BAD_ARGUMENT }
        val text = { p: ByteArray -> if (p.isEmpty()) "" else p.copyOfRange(1, p.size).decodeToString() }
        if (badArgument != null) return IllegalArgumentException("$operation: ${text(badArgument)}", mine.error.takeIf { myRank in failed })
        val list = failed.entries.sortedBy { it.key }.joinToString("; ") { (r, p) -> "rank $r: ${text(p)}" }
        return ObjectCodecException(
            "$operation: the codec could not encode the value of ${if (failed.size == 1) "rank" else "ranks"} " +
                "${failed.keys.sorted().joinToString(", ")} ($list). Every rank throws this; the collective completed " +
                "and the communicator is still usable.",
            failed.keys.sorted(), mine.error.takeIf { myRank in failed },
        )
    }

    suspend fun <T> allGather(comm: Communicator, value: T, codec: ObjectCodec<T>): List<T> {
        val operation = "allGatherObject"
        val mine = encode(codec, value)
        val headers = comm.allGather(Tensor.of(longArrayOf(mine.header))).toLongArray()
        val lengths = LongArray(headers.size) { payloadLength(headers[it]) }
        val max = lengths.max()
        require(max <= Int.MAX_VALUE) { "$operation: a value of ${lengths.max()} bytes is too large; values must encode to under 2 GiB" }
        val width = max.toInt()
        val gathered = if (width == 0) null else {
            val padded = Tensor.zeros(DType.UInt8, width)
            MemorySegment.copy(mine.payload, 0, padded.segment, ValueLayout.JAVA_BYTE, 0, mine.payload.size)
            comm.allGather(padded)
        }
        val payload = { r: Int -> if (gathered == null) ByteArray(0) else bytesOf(gathered, r.toLong() * width, lengths[r].toInt()) }
        val failed = headers.indices.filter { headers[it] < 0 }.associateWith(payload)
        if (failed.isNotEmpty()) throw failure(operation, failed, mine, comm.rank)
        return List(comm.worldSize) { r -> decode(operation, codec, r, payload(r)) }
    }

    suspend fun <T> broadcast(comm: Communicator, value: T?, root: Int, codec: ObjectCodec<T>): T {
        val operation = "broadcastObject"
        require(root in 0 until comm.worldSize) { "$operation: root $root is out of range; use a rank in 0 until ${comm.worldSize}" }
        val mine = when {
            comm.rank != root -> Encoded(ByteArray(0), CODEC, null)
            value == null -> Encoded(null, BAD_ARGUMENT, IllegalArgumentException("the root (rank $root) must pass a value, got null"))
            else -> encode(codec, value)
        }
        val header = Tensor.of(longArrayOf(mine.header))
        comm.broadcast(header, root)
        val h = header.getLong(0)
        val length = payloadLength(h)
        require(length <= Int.MAX_VALUE) { "$operation: a value of $length bytes is too large; values must encode to under 2 GiB" }
        val bytes = if (length == 0L) ByteArray(0) else {
            val t = Tensor.zeros(DType.UInt8, length.toInt())
            if (comm.rank == root) MemorySegment.copy(mine.payload, 0, t.segment, ValueLayout.JAVA_BYTE, 0, mine.payload.size)
            comm.broadcast(t, root)
            bytesOf(t, 0, length.toInt())
        }
        if (h < 0) throw failure(operation, mapOf(root to bytes), mine, comm.rank)
        return decode(operation, codec, root, bytes)
    }
}
