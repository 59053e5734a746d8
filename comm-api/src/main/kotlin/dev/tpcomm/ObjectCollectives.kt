package dev.tpcomm

import dev.tpcomm.spi.CommunicationErrors
import dev.tpcomm.spi.FailureState
import kotlinx.serialization.KSerializer
import kotlinx.serialization.SerializationException
import kotlinx.serialization.json.Json
import kotlinx.serialization.serializer
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

/**
 * Object collectives on top of byte tensors: values are encoded as UTF-8 JSON with
 * kotlinx-serialization, lengths exchanged first, then the padded payloads.
 *
 * What peers send is checked before it is used: a length outside `0..`[MAX_LENGTH] or bytes that
 * do not decode as the expected type give a [CommunicationException] naming this rank, the
 * operation (`allGatherObject`, `broadcastObject`), the peer and what it sent (built by the core's
 * [FailureState]), never a raw `NegativeArraySizeException`, `IndexOutOfBoundsException` or
 * serialization exception. Every rank receives the same lengths, so in an all-gather every rank
 * refuses the same way; in a broadcast the receivers refuse and the root fails at its next call.
 */
internal object ObjectCollectives {
    private val json = Json { encodeDefaults = true }

    /** The largest encoded value a rank may send: a JVM byte array's limit. */
    const val MAX_LENGTH: Long = Int.MAX_VALUE - 8L

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

    /** The builder of this rank's exceptions (no flight recorder at this layer: the dump is null). */
    private fun errors(comm: Communicator) = CommunicationErrors(comm.rank, comm.backendName)

    /**
     * The length a rank announces when its own serializer failed: it still takes part in the
     * length exchange, so its peers fail at once with a named exception instead of waiting for a
     * payload that never comes.
     */
    private const val ENCODING_FAILED: Long = -2L

    /** Refuses a [length] announced by [who] that no encoded value can have. */
    private fun checkLength(comm: Communicator, operation: String, who: String, length: Long) {
        if (length in 0..MAX_LENGTH) return
        if (length == ENCODING_FAILED) {
            throw errors(comm).failure(operation, -1, "$who could not encode its value (its own exception says why); no value was exchanged")
        }
        throw errors(comm).failure(
            operation, -1,
            "$who announced a value of $length bytes, which is not in 0..$MAX_LENGTH; " +
                "every rank must call $operation at this position of its program (a peer called another collective, or runs another version)",
        )
    }

    private fun <T> decode(comm: Communicator, operation: String, who: String, bytes: ByteArray, serializer: KSerializer<T>): T = try {
        json.decodeFromString(serializer, bytes.decodeToString())
    } catch (e: SerializationException) {
        throw errors(comm).failure(
            operation, -1,
            "the ${bytes.size} bytes $who sent do not decode as ${serializer.descriptor.serialName}: ${e.message}; " +
                "every rank must pass a value of the same type to $operation",
            e,
        )
    } catch (e: IllegalArgumentException) {
        throw errors(comm).failure(
            operation, -1,
            "the ${bytes.size} bytes $who sent do not decode as ${serializer.descriptor.serialName}: ${e.message}",
            e,
        )
    }

    suspend fun <T> allGather(comm: Communicator, value: T, serializer: KSerializer<T>): List<T> {
        val op = "allGatherObject"
        val encoded = runCatching { json.encodeToString(serializer, value).encodeToByteArray() }
        val bytes = encoded.getOrElse { ByteArray(0) }
        val lengths = comm.allGather(Tensor.of(longArrayOf(if (encoded.isSuccess) bytes.size.toLong() else ENCODING_FAILED)))
        encoded.exceptionOrNull()?.let { throw it }
        val all = lengths.toLongArray()
        for (r in all.indices) checkLength(comm, op, "rank $r", all[r])
        val max = all.max().toInt()
        val padded = Tensor.zeros(DType.UInt8, max)
        MemorySegment.copy(bytes, 0, padded.segment, ValueLayout.JAVA_BYTE, 0, bytes.size)
        val gathered = comm.allGather(padded)
        return List(comm.worldSize) { r ->
            decode(comm, op, "rank $r", decodeBytes(gathered, r.toLong() * max, all[r].toInt()), serializer)
        }
    }

    suspend fun <T> broadcast(comm: Communicator, value: T?, root: Int, serializer: KSerializer<T>): T {
        val op = "broadcastObject"
        require(root in 0 until comm.worldSize) { "broadcastObject: root $root is out of range; use a rank in 0 until ${comm.worldSize}" }
        if (comm.rank == root) {
            requireNotNull(value) { "broadcastObject: the root (rank $root) must pass a value, got null" }
        }
        val encoded = runCatching {
            if (comm.rank == root) @Suppress("UNCHECKED_CAST") json.encodeToString(serializer, value as T).encodeToByteArray() else ByteArray(0)
        }
        val bytes = encoded.getOrElse { ByteArray(0) }
        val length = Tensor.of(longArrayOf(if (encoded.isSuccess) bytes.size.toLong() else ENCODING_FAILED))
        comm.broadcast(length, root)
        encoded.exceptionOrNull()?.let { throw it }
        val announced = length.getLong(0)
        checkLength(comm, op, "the root rank $root", announced)
        val n = announced.toInt()
        val payload = if (comm.rank == root) encode(bytes) else Tensor.zeros(DType.UInt8, n)
        comm.broadcast(payload, root)
        return decode(comm, op, "the root rank $root", decodeBytes(payload, 0, n), serializer)
    }
}

/** [Communicator.allGatherObject] with the serializer found from [T]. */
public suspend inline fun <reified T> Communicator.allGatherObject(value: T): List<T> =
    allGatherObject(value, serializer<T>())

/** [Communicator.broadcastObject] with the serializer found from [T]. */
public suspend inline fun <reified T> Communicator.broadcastObject(value: T?, root: Int): T =
    broadcastObject(value, root, serializer<T>())
