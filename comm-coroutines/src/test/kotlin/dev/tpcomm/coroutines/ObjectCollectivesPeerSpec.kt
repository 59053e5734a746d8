package dev.tpcomm.coroutines

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommConfig
import dev.tpcomm.MessageInfo
import dev.tpcomm.spi.ObjectProtocol
import dev.tpcomm.spi.ObjectTransport
import kotlinx.serialization.builtins.serializer
import dev.tpcomm.CommunicationException
import dev.tpcomm.Tensor
import dev.tpcomm.allGatherObject
import dev.tpcomm.broadcastObject
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import kotlinx.coroutines.async
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import kotlin.time.Duration.Companion.seconds

/**
 * Object collectives when a peer sends what the protocol does not allow (a peer running another
 * version, or calling a tensor collective at that position): every such case is a
 * CommunicationException naming this rank, the operation, the peer and what it sent, never a raw
 * NegativeArraySizeException / IndexOutOfBoundsException / SerializationException.
 */
class ObjectCollectivesPeerSpec : FunSpec({
    val config = CommConfig(timeout = 10.seconds)

    test("a peer's tensor collective at an object collective's place is a mismatch naming the object collective, on every rank").config(timeout = 30.seconds) {
        val world = LocalWorld(2, config)
        val outcomes = kotlinx.coroutines.coroutineScope {
            (0 until 2).map { r ->
                async {
                    runCatching {
                        val comm = world.communicator(r)
                        if (r == 0) comm.allGatherObject("hello") else comm.allGather(Tensor.of(longArrayOf(-5)))
                    }.exceptionOrNull()
                }
            }.map { it.await() }
        }
        val first = outcomes[0].shouldBeInstanceOfCommunication()
        (first is CollectiveMismatchException) shouldBe true
        first.operation shouldBe "allGatherObject"
        first.message shouldContain "rank 1 called allGather(Int64[1]"
        val second = outcomes[1].shouldBeInstanceOfCommunication()
        (second is CollectiveMismatchException) shouldBe true
        second.message shouldContain "rank 0 called allGatherObject"
    }

    // What a peer running another version (or one with the consistency check off, where a backend
    // can turn it off) could deliver: the protocol's own checks, driven through a transport that
    // delivers exactly that.
    val comm = LocalWorld(2, config).communicator(0)

    test("allGatherObject: a peer's negative length is a CommunicationException naming rank, operation and length") {
        val e = shouldThrow<CommunicationException> { ObjectProtocol.allGather(comm, Scripted(longArrayOf(7, -5)), "hello", String.serializer()) }
        e.rank shouldBe 0
        e.operation shouldBe "allGatherObject"
        e.message shouldContain "rank 1"
        e.message shouldContain "-5"
    }

    test("allGatherObject: a peer's length beyond what a value can have is refused, not truncated to an Int") {
        val e = shouldThrow<CommunicationException> { ObjectProtocol.allGather(comm, Scripted(longArrayOf(7, 1L shl 40)), "hello", String.serializer()) }
        e.operation shouldBe "allGatherObject"
        e.message shouldContain "rank 1"
        e.message shouldContain "${1L shl 40}"
    }

    test("broadcastObject: the root's negative length is a CommunicationException on the receivers") {
        val receiver = LocalWorld(2, config).communicator(1)
        val e = shouldThrow<CommunicationException> { ObjectProtocol.broadcast(receiver, Scripted(longArrayOf(-1)), null, 0, String.serializer()) }
        e.rank shouldBe 1
        e.operation shouldBe "broadcastObject"
        e.message shouldContain "root rank 0"
        e.message shouldContain "-1"
    }

    test("allGatherObject: a peer's bytes that do not decode are a CommunicationException naming the rank") {
        val good = "12345".encodeToByteArray()
        val bad = ByteArray(5) { '{'.code.toByte() }
        val e = shouldThrow<CommunicationException> { ObjectProtocol.allGather(comm, Scripted(longArrayOf(5, 5), listOf(good, bad)), 12345, Int.serializer()) }
        e.operation shouldBe "allGatherObject"
        e.message shouldContain "rank 1"
    }

    test("a serializer that throws on one rank fails every rank at once, not at the timeout").config(timeout = 30.seconds) {
        val failing = object : kotlinx.serialization.KSerializer<Int> {
            override val descriptor = kotlinx.serialization.descriptors.PrimitiveSerialDescriptor("Flaky", kotlinx.serialization.descriptors.PrimitiveKind.INT)
            override fun serialize(encoder: kotlinx.serialization.encoding.Encoder, value: Int) {
                if (value == 1) throw IllegalStateException("rank 1's value cannot be encoded")
                encoder.encodeInt(value)
            }
            override fun deserialize(decoder: kotlinx.serialization.encoding.Decoder): Int = decoder.decodeInt()
        }
        val world = dev.tpcomm.coroutines.LocalWorld(2, config)
        val t0 = System.nanoTime()
        val outcomes = kotlinx.coroutines.coroutineScope {
            (0 until 2).map { r ->
                async { runCatching { world.communicator(r).allGatherObject(r, failing) }.exceptionOrNull() }
            }.map { it.await() }
        }
        val seconds = (System.nanoTime() - t0) / 1e9
        (seconds < 5.0) shouldBe true
        outcomes[1]!!.message shouldContain "rank 1's value cannot be encoded"
        val peer = outcomes[0].shouldBeInstanceOfCommunication()
        peer.operation shouldBe "allGatherObject"
        peer.message shouldContain "rank 1 could not encode its value"
        val b = kotlinx.coroutines.coroutineScope {
            val w2 = dev.tpcomm.coroutines.LocalWorld(2, config)
            (0 until 2).map { r ->
                async { runCatching { w2.communicator(r).broadcastObject(if (r == 0) 1 else null, 0, failing) }.exceptionOrNull() }
            }.map { it.await() }
        }
        b[1].shouldBeInstanceOfCommunication().message shouldContain "the root rank 0 could not encode its value"
    }
})

/** A transport that delivers fixed lengths and rows, whatever the ranks pass. */
private class Scripted(private val lengths: LongArray, private val rows: List<ByteArray> = emptyList()) : ObjectTransport {
    override suspend fun allGatherLength(operation: String, length: Long): LongArray = lengths
    override suspend fun broadcastLengths(operation: String, lengths: LongArray, root: Int): LongArray = this.lengths
    override suspend fun sendLength(operation: String, length: Long, dst: Int, tag: Int) = error("not scripted")
    override suspend fun recvLength(operation: String, src: Int, tag: Int): Pair<Long, MessageInfo> = error("not scripted")
    override suspend fun allGather(operation: String, bytes: ByteArray): List<ByteArray> = rows
    override suspend fun broadcast(operation: String, bytes: ByteArray, root: Int): ByteArray = rows[0]
    override suspend fun gather(operation: String, bytes: ByteArray, root: Int): List<ByteArray>? = rows
    override suspend fun scatter(operation: String, rows: List<ByteArray>?, size: Int, root: Int): ByteArray = this.rows[0]
    override suspend fun send(operation: String, bytes: ByteArray, dst: Int, tag: Int) = error("not scripted")
    override suspend fun recv(operation: String, size: Int, src: Int, tag: Int): Pair<ByteArray, MessageInfo> = error("not scripted")
}

private fun Throwable?.shouldBeInstanceOfCommunication(): CommunicationException {
    (this is CommunicationException) shouldBe true
    return this as CommunicationException
}
