package dev.tpcomm

import dev.tpcomm.spi.CollectiveChecks
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
 * operation (`allGatherObject`, `broadcastObject`, `gatherObject`, `scatterObject`, `recvObject`), the peer and what it sent (built by the core's
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

    /** The length a root announces when its own arguments were wrong (a scatter's list): its call throws [IllegalArgumentException]. */
    private const val BAD_ARGUMENT: Long = -3L

    /** Refuses a [length] announced by [who] that no encoded value can have. */
    private fun checkLength(comm: Communicator, operation: String, who: String, length: Long) {
        if (length in 0..MAX_LENGTH) return
        if (length == ENCODING_FAILED) {
            throw errors(comm).failure(operation, -1, "$who could not encode its value (its own exception says why); no value was exchanged")
        }
        if (length == BAD_ARGUMENT) {
            throw errors(comm).failure(operation, -1, "$who passed a wrong argument to $operation (its own IllegalArgumentException says what); no value was exchanged")
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

    suspend fun <T> gather(comm: Communicator, value: T, root: Int, serializer: KSerializer<T>): List<T>? {
        val op = "gatherObject"
        CollectiveChecks.root(root, comm.worldSize, op)
        val encoded = runCatching { json.encodeToString(serializer, value).encodeToByteArray() }
        val bytes = encoded.getOrElse { ByteArray(0) }
        // Every rank learns every length (8 bytes per rank), so all refuse a bad one alike and know the padding.
        val lengths = comm.allGather(Tensor.of(longArrayOf(if (encoded.isSuccess) bytes.size.toLong() else ENCODING_FAILED)))
        encoded.exceptionOrNull()?.let { throw it }
        val all = lengths.toLongArray()
        for (r in all.indices) checkLength(comm, op, "rank $r", all[r])
        val max = all.max().toInt()
        // [1, max], gathered into [n, max] (two dimensions: n x max may exceed an Int).
        val padded = Tensor.zeros(DType.UInt8, 1, max)
        MemorySegment.copy(bytes, 0, padded.segment, ValueLayout.JAVA_BYTE, 0, bytes.size)
        val gathered = comm.gather(padded, root) ?: return null
        return List(comm.worldSize) { r ->
            decode(comm, op, "rank $r", decodeBytes(gathered, r.toLong() * max, all[r].toInt()), serializer)
        }
    }

    suspend fun <T> scatter(comm: Communicator, values: List<T>?, root: Int, serializer: KSerializer<T>): T {
        val op = "scatterObject"
        val n = comm.worldSize
        CollectiveChecks.root(root, n, op)
        val isRoot = comm.rank == root
        val badArgument: String? = when {
            !isRoot -> null
            values == null -> "$op: the root (rank $root) must pass a list of $n values, got null"
            values.size != n -> "$op: the root (rank $root) must pass one value per rank ($n), got ${values.size}"
            else -> null
        }
        // The root announces a bad argument or an encoding failure in the length exchange, so the
        // other ranks fail at once instead of waiting for payloads that never come.
        val encoded = if (isRoot && badArgument == null) runCatching { values!!.map { json.encodeToString(serializer, it).encodeToByteArray() } } else null
        val lengths = Tensor.zeros(DType.Int64, n)
        if (isRoot) {
            for (r in 0 until n) {
                val length = when {
                    badArgument != null -> BAD_ARGUMENT
                    encoded!!.isFailure -> ENCODING_FAILED
                    else -> encoded.getOrThrow()[r].size.toLong()
                }
                lengths.setLong(r.toLong(), length)
            }
        }
        comm.broadcast(lengths, root)
        badArgument?.let { throw IllegalArgumentException(it) }
        encoded?.exceptionOrNull()?.let { throw it }
        val all = lengths.toLongArray()
        for (r in all.indices) checkLength(comm, op, "the root rank $root", all[r])
        val max = all.max().toInt()
        val input = if (isRoot) {
            val payloads = encoded!!.getOrThrow()
            // [n, max]: row r is rank r's padded encoding (two dimensions: n x max may exceed an Int).
            Tensor.zeros(DType.UInt8, n, max).also { t ->
                for (r in 0 until n) MemorySegment.copy(payloads[r], 0, t.segment, ValueLayout.JAVA_BYTE, r.toLong() * max, payloads[r].size)
            }
        } else {
            null
        }
        val output = Tensor.zeros(DType.UInt8, 1, max)
        comm.scatter(output, input, root)
        return decode(comm, op, "the root rank $root", decodeBytes(output, 0, all[comm.rank].toInt()), serializer)
    }

    suspend fun <T> send(comm: Communicator, value: T, dst: Int, tag: Int, serializer: KSerializer<T>) {
        val op = "sendObject"
        CollectiveChecks.peer(dst, comm.worldSize, op, allowAny = false)
        CollectiveChecks.tag(tag, op, allowAny = false)
        val encoded = runCatching { json.encodeToString(serializer, value).encodeToByteArray() }
        val bytes = encoded.getOrElse { ByteArray(0) }
        comm.send(Tensor.of(longArrayOf(if (encoded.isSuccess) bytes.size.toLong() else ENCODING_FAILED)), dst, tag)
        encoded.exceptionOrNull()?.let { throw it }
        comm.send(encode(bytes), dst, tag)
    }

    suspend fun <T> recv(comm: Communicator, src: Int, tag: Int, serializer: KSerializer<T>): T {
        val op = "recvObject"
        CollectiveChecks.peer(src, comm.worldSize, op, allowAny = true)
        CollectiveChecks.tag(tag, op, allowAny = true)
        val length = Tensor.zeros(DType.Int64, 1)
        val info = comm.recv(length, src, tag)
        val who = "rank ${info.source}"
        val announced = length.getLong(0)
        checkLength(comm, op, who, announced)
        val payload = Tensor.zeros(DType.UInt8, announced.toInt())
        // The payload follows its length from the same rank with the same tag (per-pair, per-tag order).
        comm.recv(payload, info.source, info.tag)
        return decode(comm, op, who, decodeBytes(payload, 0, announced.toInt()), serializer)
    }
}

/** [Communicator.allGatherObject] with the serializer found from [T]. */
public suspend inline fun <reified T> Communicator.allGatherObject(value: T): List<T> =
    allGatherObject(value, serializer<T>())

/** [Communicator.broadcastObject] with the serializer found from [T]. */
public suspend inline fun <reified T> Communicator.broadcastObject(value: T?, root: Int): T =
    broadcastObject(value, root, serializer<T>())

/** [Communicator.gatherObject] with the serializer found from [T]. */
public suspend inline fun <reified T> Communicator.gatherObject(value: T, root: Int): List<T>? =
    gatherObject(value, root, serializer<T>())

/** [Communicator.scatterObject] with the serializer found from [T]. */
public suspend inline fun <reified T> Communicator.scatterObject(values: List<T>?, root: Int): T =
    scatterObject(values, root, serializer<T>())

/** [Communicator.sendObject] with the serializer found from [T]. */
public suspend inline fun <reified T> Communicator.sendObject(value: T, dst: Int, tag: Int = 0): Unit =
    sendObject(value, dst, tag, serializer<T>())

/** [Communicator.recvObject] with the serializer found from [T]. */
public suspend inline fun <reified T> Communicator.recvObject(src: Int, tag: Int = 0): T =
    recvObject(src, tag, serializer<T>())
