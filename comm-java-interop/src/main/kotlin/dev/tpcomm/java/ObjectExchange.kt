package dev.tpcomm.java

import dev.tpcomm.Communicator
import kotlinx.serialization.Serializable
import java.util.Base64

/**
 * The object collectives of [JavaCommunicator] with any [ObjectCodec].
 *
 * Each rank encodes its own value and wraps the bytes, or why there are none, in an [Envelope]
 * that travels through the communicator's own `allGatherObject`/`broadcastObject` (so every backend
 * moves it its own way: host tensors on the local and MPI backends, device staging buffers on
 * NCCL/RCCL, which refuse host tensors). Every rank sees every envelope, so when one rank's codec
 * failed all ranks take the same path and all throw the same failure, at once: nobody waits for a
 * value that never comes, and the collective itself completed, so the communicator stays usable.
 */
internal object ObjectExchange {
    private const val MAX_MESSAGE_CHARS = 2000

    /** One rank's contribution: its encoded value (Base64), or the description of why it has none. */
    @Serializable
    class Envelope(val payload: String? = null, val failure: String? = null, val badArgument: Boolean = false, val sender: Int = -1)

    /** This rank's envelope and, when its codec threw, the exception (the cause on this rank). */
    private class Encoded(val envelope: Envelope, val error: Throwable?)

    private fun describe(e: Throwable): String = "${e.javaClass.name}: ${e.message}".take(MAX_MESSAGE_CHARS)

    private fun <T> encode(codec: ObjectCodec<T>, value: T): Encoded = try {
        @Suppress("USELESS_CAST", "KotlinConstantConditions")
        val bytes = codec.encode(value) as ByteArray?
        if (bytes == null) {
            val e = NullPointerException("$codec returned null from encode")
            Encoded(Envelope(failure = describe(e)), e)
        } else {
            Encoded(Envelope(payload = Base64.getEncoder().encodeToString(bytes)), null)
        }
    } catch (e: Exception) {
        Encoded(Envelope(failure = describe(e)), e)
    }

    private fun <T> decode(operation: String, codec: ObjectCodec<T>, rank: Int, envelope: Envelope): T {
        val bytes = Base64.getDecoder().decode(checkNotNull(envelope.payload) { "$operation: rank $rank sent neither a value nor a failure" })
        return try {
            codec.decode(bytes)
        } catch (e: Exception) {
            throw ObjectCodecException(
                "$operation: the codec could not decode the value of rank $rank (${bytes.size} bytes): ${describe(e)}. " +
                    "Every rank decodes the same bytes; the collective completed and the communicator is still usable.",
                listOf(rank), e,
            )
        }
    }

    /**
     * The failure a rank throws when some envelopes ([failed], by rank) carry one; [who] says which
     * ranks throw it (every rank in the collectives whose envelopes every rank sees).
     */
    private fun failure(
        operation: String,
        failed: Map<Int, Envelope>,
        mine: Encoded,
        myRank: Int,
        who: String = "Every rank throws this; the collective completed",
    ): RuntimeException {
        val cause = mine.error.takeIf { myRank in failed }
        failed.values.firstOrNull { it.badArgument }?.let { return IllegalArgumentException("$operation: ${it.failure}", cause) }
        val ranks = failed.keys.sorted()
        val list = ranks.joinToString("; ") { r -> "rank $r: ${failed.getValue(r).failure}" }
        return ObjectCodecException(
            "$operation: the codec could not encode the value of ${if (ranks.size == 1) "rank" else "ranks"} " +
                "${ranks.joinToString(", ")} ($list). $who " +
                "and the communicator is still usable.",
            ranks, cause,
        )
    }

    suspend fun <T> allGather(comm: Communicator, value: T, codec: ObjectCodec<T>): List<T> {
        val operation = "allGatherObject"
        val mine = encode(codec, value)
        val all = comm.allGatherObject(mine.envelope, Envelope.serializer())
        val failed = all.indices.filter { all[it].failure != null }.associateWith { all[it] }
        if (failed.isNotEmpty()) throw failure(operation, failed, mine, comm.rank)
        return List(all.size) { r -> decode(operation, codec, r, all[r]) }
    }

    suspend fun <T> broadcast(comm: Communicator, value: T?, root: Int, codec: ObjectCodec<T>): T {
        val operation = "broadcastObject"
        require(root in 0 until comm.worldSize) { "$operation: root $root is out of range; use a rank in 0 until ${comm.worldSize}" }
        val mine = when {
            comm.rank != root -> null
            value == null -> Encoded(Envelope(failure = "the root (rank $root) must pass a value, got null", badArgument = true), null)
            else -> encode(codec, value)
        }
        val received = comm.broadcastObject(mine?.envelope, root, Envelope.serializer())
        if (received.failure != null) throw failure(operation, mapOf(root to received), mine ?: Encoded(received, null), comm.rank)
        return decode(operation, codec, root, received)
    }

    suspend fun <T> gather(comm: Communicator, value: T, root: Int, codec: ObjectCodec<T>): List<T>? {
        val operation = "gatherObject"
        val mine = encode(codec, value)
        val all = comm.gatherObject(mine.envelope, root, Envelope.serializer())
        if (all == null) {
            // Only the root sees every envelope: a rank whose codec failed throws its own failure.
            if (mine.envelope.failure != null) {
                throw failure(operation, mapOf(comm.rank to mine.envelope), mine, comm.rank, "This rank and the root (rank $root) throw this; the gather completed")
            }
            return null
        }
        val failed = all.indices.filter { all[it].failure != null }.associateWith { all[it] }
        if (failed.isNotEmpty()) throw failure(operation, failed, mine, comm.rank, "The root and the failing ranks throw this; the gather completed")
        return List(all.size) { r -> decode(operation, codec, r, all[r]) }
    }

    suspend fun <T> scatter(comm: Communicator, values: List<T>?, root: Int, codec: ObjectCodec<T>): T {
        val operation = "scatterObject"
        val n = comm.worldSize
        require(root in 0 until n) { "$operation: root $root is out of range; use a rank in 0 until $n" }
        var mine: Encoded? = null
        val envelopes: List<Envelope>? = when {
            comm.rank != root -> null
            values == null -> List(n) { Envelope(failure = "the root (rank $root) must pass a list of $n values, got null", badArgument = true) }
            values.size != n -> List(n) { Envelope(failure = "the root (rank $root) must pass one value per rank ($n), got ${values.size}", badArgument = true) }
            else -> {
                val encoded = values.map { encode(codec, it) }
                // One value the codec cannot encode fails every rank alike (each is sent that failure).
                val bad = encoded.firstOrNull { it.error != null }
                if (bad != null) mine = bad
                if (bad != null) List(n) { bad.envelope } else encoded.map { it.envelope }
            }
        }
        val received = comm.scatterObject(envelopes, root, Envelope.serializer())
        if (received.failure != null) throw failure(operation, mapOf(root to received), mine ?: Encoded(received, null), comm.rank)
        return decode(operation, codec, root, received)
    }

    suspend fun <T> send(comm: Communicator, value: T, dst: Int, tag: Int, codec: ObjectCodec<T>) {
        val operation = "sendObject"
        val mine = encode(codec, value)
        val e = mine.envelope
        comm.sendObject(Envelope(e.payload, e.failure, e.badArgument, sender = comm.rank), dst, tag, Envelope.serializer())
        if (mine.envelope.failure != null) {
            throw failure(operation, mapOf(comm.rank to mine.envelope), mine, comm.rank, "This rank and the receiver (rank $dst) throw this; the message was sent")
        }
    }

    suspend fun <T> recv(comm: Communicator, src: Int, tag: Int, codec: ObjectCodec<T>): T {
        val operation = "recvObject"
        val received = comm.recvObject(src, tag, Envelope.serializer())
        val sender = if (src == Communicator.ANY_SOURCE) received.sender else src
        if (received.failure != null) {
            throw failure(operation, mapOf(sender to received), Encoded(received, null), comm.rank, "The sender and this rank throw this; the message was received")
        }
        return decode(operation, codec, sender, received)
    }
}
