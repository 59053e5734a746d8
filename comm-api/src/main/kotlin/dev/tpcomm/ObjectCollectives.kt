package dev.tpcomm

import kotlinx.serialization.KSerializer
import kotlinx.serialization.json.Json
import kotlinx.serialization.serializer
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

/**
 * Object collectives on top of byte tensors: values are encoded as UTF-8 JSON with
 * kotlinx-serialization, lengths exchanged first, then the padded payloads.
 */
internal object ObjectCollectives {
    private val json = Json { encodeDefaults = true }

    private fun encode(bytes: ByteArray): Tensor {
        val t = Tensor.zeros(DType.UInt8, bytes.size)
        MemorySegment.copy(bytes, 0, t.segment, ValueLayout.JAVA_BYTE, 0, bytes.size)
        return t
    }

    private fun decodeBytes(t: Tensor, offset: Long, length: Int): ByteArray {
        val out = ByteArray(length)
        MemorySegment.copy(t.segment, ValueLayout.JAVA_BYTE, offset, out, 0, length)
        return out
    }

    suspend fun <T> allGather(comm: Communicator, value: T, serializer: KSerializer<T>): List<T> {
        val bytes = json.encodeToString(serializer, value).encodeToByteArray()
        val lengths = comm.allGather(Tensor.of(longArrayOf(bytes.size.toLong())))
        val all = lengths.toLongArray()
        val max = all.max().toInt()
        val padded = Tensor.zeros(DType.UInt8, max)
        MemorySegment.copy(bytes, 0, padded.segment, ValueLayout.JAVA_BYTE, 0, bytes.size)
        val gathered = comm.allGather(padded)
        return List(comm.worldSize) { r ->
            json.decodeFromString(serializer, decodeBytes(gathered, r.toLong() * max, all[r].toInt()).decodeToString())
        }
    }

    suspend fun <T> broadcast(comm: Communicator, value: T?, root: Int, serializer: KSerializer<T>): T {
        require(root in 0 until comm.worldSize) { "broadcastObject: root $root is out of range; use a rank in 0 until ${comm.worldSize}" }
        if (comm.rank == root) {
            requireNotNull(value) { "broadcastObject: the root (rank $root) must pass a value, got null" }
        }
        val bytes = if (comm.rank == root) @Suppress("UNCHECKED_CAST") json.encodeToString(serializer, value as T).encodeToByteArray() else ByteArray(0)
        val length = Tensor.of(longArrayOf(bytes.size.toLong()))
        comm.broadcast(length, root)
        val n = length.getLong(0).toInt()
        val payload = if (comm.rank == root) encode(bytes) else Tensor.zeros(DType.UInt8, n)
        comm.broadcast(payload, root)
        return json.decodeFromString(serializer, decodeBytes(payload, 0, n).decodeToString())
    }
}

/** [Communicator.allGatherObject] with the serializer found from [T]. */
public suspend inline fun <reified T> Communicator.allGatherObject(value: T): List<T> =
    allGatherObject(value, serializer<T>())

/** [Communicator.broadcastObject] with the serializer found from [T]. */
public suspend inline fun <reified T> Communicator.broadcastObject(value: T?, root: Int): T =
    broadcastObject(value, root, serializer<T>())
