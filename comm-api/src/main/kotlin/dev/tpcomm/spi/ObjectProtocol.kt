package dev.tpcomm.spi

import dev.tpcomm.CommunicationException
import dev.tpcomm.Communicator
import dev.tpcomm.InternalTpcommApi
import kotlinx.serialization.KSerializer
import kotlinx.serialization.SerializationException
import kotlinx.serialization.json.Json

/**
 * The object collectives of every backend ([Communicator.allGatherObject], `broadcastObject`,
 * `gatherObject`, `scatterObject`, `sendObject`/`recvObject`) over an [ObjectTransport]: values are
 * encoded as UTF-8 JSON with kotlinx-serialization, lengths exchanged first, then the payloads
 * (padded to the longest where a collective needs equal sizes).
 *
 * What peers send is checked before it is used: a length outside `0..`[MAX_LENGTH] or bytes that
 * do not decode as the expected type give a [CommunicationException] naming this rank, the
 * operation, the peer and what it sent (built by the core's [CommunicationErrors]), never a raw
 * `NegativeArraySizeException`, `IndexOutOfBoundsException` or serialization exception. A rank
 * whose serializer fails, or a root whose arguments are wrong, still takes part in the length
 * exchange with a marker, so its peers fail at once with a named exception instead of waiting for a
 * payload that never comes. Whoever sees a length refuses it: in an all-gather and a gather every
 * rank (all lengths are all-gathered), in a broadcast and a scatter every rank (the root's lengths
 * are broadcast), for a message its receiver. These failures leave the communicator usable.
 */
@InternalTpcommApi
public object ObjectProtocol {
    private val json = Json { encodeDefaults = true }

    /** The largest encoded value a rank may send: a JVM byte array's limit. */
    public const val MAX_LENGTH: Long = Int.MAX_VALUE - 8L

    /** The length a rank announces when its own serializer failed (its own call throws the serializer's exception). */
    private const val ENCODING_FAILED: Long = -2L

    /** The length a root announces when its own arguments were wrong (a scatter's list): its call throws [IllegalArgumentException]. */
    private const val BAD_ARGUMENT: Long = -3L

    /**
     * Who names this protocol's failures: [errors] (the communicator's, with its flight recorder's
     * dump) and [sequence] (the object operation's own number), or a plain builder and no number.
     */
    public class Naming(
        /** The builder of the exceptions. */
        @JvmField public val errors: CommunicationErrors,
        /** The operation's sequence number ([CommunicationErrors.NO_SEQUENCE] when it has none). */
        @JvmField public val sequence: Long,
    )

    private fun naming(comm: Communicator, naming: Naming?): Naming =
        naming ?: Naming(CommunicationErrors(comm.rank, comm.backendName), CommunicationErrors.NO_SEQUENCE)

    private fun padded(bytes: ByteArray, size: Int): ByteArray = if (bytes.size == size) bytes else bytes.copyOf(size)

    /** Refuses a [length] announced by [who] that no encoded value can have. */
    private fun checkLength(n: Naming, operation: String, who: String, length: Long) {
        if (length in 0..MAX_LENGTH) return
        if (length == ENCODING_FAILED) {
            throw n.errors.failure(operation, n.sequence, "$who could not encode its value (its own exception says why); no value was exchanged")
        }
        if (length == BAD_ARGUMENT) {
            throw n.errors.failure(operation, n.sequence, "$who passed a wrong argument to $operation (its own IllegalArgumentException says what); no value was exchanged")
        }
        throw n.errors.failure(
            operation, n.sequence,
            "$who announced a value of $length bytes, which is not in 0..$MAX_LENGTH; " +
                "every rank must call $operation at this position of its program (a peer called another collective, or runs another version)",
        )
    }

    private fun <T> decode(n: Naming, operation: String, who: String, bytes: ByteArray, length: Int, serializer: KSerializer<T>): T = try {
        json.decodeFromString(serializer, bytes.decodeToString(0, length))
    } catch (e: SerializationException) {
        throw n.errors.failure(
            operation, n.sequence,
            "the $length bytes $who sent do not decode as ${serializer.descriptor.serialName}: ${e.message}; " +
                "every rank must pass a value of the same type to $operation",
            e,
        )
    } catch (e: IllegalArgumentException) {
        throw n.errors.failure(
            operation, n.sequence,
            "the $length bytes $who sent do not decode as ${serializer.descriptor.serialName}: ${e.message}",
            e,
        )
    }

    private fun <T> encode(value: T, serializer: KSerializer<T>): Result<ByteArray> =
        runCatching { json.encodeToString(serializer, value).encodeToByteArray() }

    /** [Communicator.allGatherObject]. */
    public suspend fun <T> allGather(comm: Communicator, transport: ObjectTransport, value: T, serializer: KSerializer<T>, naming: Naming? = null): List<T> {
        val op = "allGatherObject"
        val n = naming(comm, naming)
        val encoded = encode(value, serializer)
        val bytes = encoded.getOrElse { ByteArray(0) }
        val lengths = transport.allGatherLength(op, if (encoded.isSuccess) bytes.size.toLong() else ENCODING_FAILED)
        encoded.exceptionOrNull()?.let { throw it }
        for (r in lengths.indices) checkLength(n, op, "rank $r", lengths[r])
        val max = lengths.max().toInt()
        val rows = transport.allGather(op, padded(bytes, max))
        return List(comm.worldSize) { r -> decode(n, op, "rank $r", rows[r], lengths[r].toInt(), serializer) }
    }

    /**
     * [Communicator.broadcastObject]: the root's length (or a marker when its value is null or cannot
     * be encoded, so every other rank fails at once naming the root), then the bytes.
     */
    public suspend fun <T> broadcast(comm: Communicator, transport: ObjectTransport, value: T?, root: Int, serializer: KSerializer<T>, naming: Naming? = null): T {
        val op = "broadcastObject"
        val n = naming(comm, naming)
        CollectiveChecks.root(root, comm.worldSize, op)
        val isRoot = comm.rank == root
        val badArgument = if (isRoot && value == null) "broadcastObject: the root (rank $root) must pass a value, got null" else null
        @Suppress("UNCHECKED_CAST")
        val encoded = if (isRoot && badArgument == null) encode(value as T, serializer) else Result.success(ByteArray(0))
        val bytes = encoded.getOrElse { ByteArray(0) }
        val mine = when {
            badArgument != null -> BAD_ARGUMENT
            encoded.isFailure -> ENCODING_FAILED
            else -> bytes.size.toLong()
        }
        val announced = transport.broadcastLengths(op, longArrayOf(mine), root)[0]
        badArgument?.let { throw IllegalArgumentException(it) }
        encoded.exceptionOrNull()?.let { throw it }
        checkLength(n, op, "the root rank $root", announced)
        val length = announced.toInt()
        val payload = transport.broadcast(op, if (isRoot) bytes else ByteArray(length), root)
        return decode(n, op, "the root rank $root", payload, length, serializer)
    }

    /** [Communicator.gatherObject]: the lengths all-gathered (every rank refuses a bad one alike and knows the padding), then one padded gather. */
    public suspend fun <T> gather(comm: Communicator, transport: ObjectTransport, value: T, root: Int, serializer: KSerializer<T>, naming: Naming? = null): List<T>? {
        val op = "gatherObject"
        val n = naming(comm, naming)
        CollectiveChecks.root(root, comm.worldSize, op)
        val encoded = encode(value, serializer)
        val bytes = encoded.getOrElse { ByteArray(0) }
        val lengths = transport.allGatherLength(op, if (encoded.isSuccess) bytes.size.toLong() else ENCODING_FAILED)
        encoded.exceptionOrNull()?.let { throw it }
        for (r in lengths.indices) checkLength(n, op, "rank $r", lengths[r])
        val max = lengths.max().toInt()
        val rows = transport.gather(op, padded(bytes, max), root) ?: return null
        return List(comm.worldSize) { r -> decode(n, op, "rank $r", rows[r], lengths[r].toInt(), serializer) }
    }

    /** [Communicator.scatterObject]: the root's lengths broadcast (with a marker for a bad argument or a failed encoding), then one padded scatter. */
    public suspend fun <T> scatter(comm: Communicator, transport: ObjectTransport, values: List<T>?, root: Int, serializer: KSerializer<T>, naming: Naming? = null): T {
        val op = "scatterObject"
        val n = naming(comm, naming)
        val size = comm.worldSize
        CollectiveChecks.root(root, size, op)
        val isRoot = comm.rank == root
        val badArgument: String? = when {
            !isRoot -> null
            values == null -> "$op: the root (rank $root) must pass a list of $size values, got null"
            values.size != size -> "$op: the root (rank $root) must pass one value per rank ($size), got ${values.size}"
            else -> null
        }
        val encoded: Result<List<ByteArray>>? =
            if (isRoot && badArgument == null) runCatching { values!!.map { encode(it, serializer).getOrThrow() } } else null
        val announced = LongArray(size) { r ->
            when {
                !isRoot -> 0L
                badArgument != null -> BAD_ARGUMENT
                encoded!!.isFailure -> ENCODING_FAILED
                else -> encoded.getOrThrow()[r].size.toLong()
            }
        }
        val lengths = transport.broadcastLengths(op, announced, root)
        badArgument?.let { throw IllegalArgumentException(it) }
        encoded?.exceptionOrNull()?.let { throw it }
        for (r in lengths.indices) checkLength(n, op, "the root rank $root", lengths[r])
        val max = lengths.max().toInt()
        val rows = encoded?.getOrThrow()?.map { padded(it, max) }
        val mine = transport.scatter(op, rows, max, root)
        return decode(n, op, "the root rank $root", mine, lengths[comm.rank].toInt(), serializer)
    }

    /**
     * [Communicator.sendObject]: [dst] and [tag] checked by [validator] (the backend's, with its
     * [PointToPointLimits]) before anything moves, then the length (or a marker when the encoding
     * failed), then the bytes.
     */
    public suspend fun <T> send(
        comm: Communicator, transport: ObjectTransport, validator: CollectiveValidator, value: T, dst: Int, tag: Int, serializer: KSerializer<T>,
        naming: Naming? = null,
    ) {
        val op = "sendObject"
        validator.sendObject(dst, tag)
        val encoded = encode(value, serializer)
        val bytes = encoded.getOrElse { ByteArray(0) }
        transport.sendLength(op, if (encoded.isSuccess) bytes.size.toLong() else ENCODING_FAILED, dst, tag)
        encoded.exceptionOrNull()?.let { throw it }
        transport.send(op, bytes, dst, tag)
    }

    /**
     * [Communicator.recvObject]: [src] and [tag] checked by [validator] as for [send], then the
     * length, then exactly that many bytes from the same rank with the same tag.
     */
    public suspend fun <T> recv(
        comm: Communicator, transport: ObjectTransport, validator: CollectiveValidator, src: Int, tag: Int, serializer: KSerializer<T>,
        naming: Naming? = null,
    ): T {
        val op = "recvObject"
        val n = naming(comm, naming)
        validator.recvObject(src, tag)
        val (announced, info) = transport.recvLength(op, src, tag)
        val who = "rank ${info.source}"
        checkLength(n, op, who, announced)
        // The payload follows its length from the same rank with the same tag (per-pair, per-tag order).
        val (payload, _) = transport.recv(op, announced.toInt(), info.source, info.tag)
        return decode(n, op, who, payload, announced.toInt(), serializer)
    }
}
