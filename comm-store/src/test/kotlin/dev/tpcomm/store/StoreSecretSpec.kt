package dev.tpcomm.store

import dev.tpcomm.store.RawClient.Companion.msg
import dev.tpcomm.store.RawClient.Companion.str
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.longs.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.nio.file.Files
import kotlin.time.Duration.Companion.seconds

/** The opt-in shared secret of a store of tpcomm ranks (issue 33 part 1): [StoreSecret]. */
class StoreSecretSpec : FunSpec({
    val secret = "s3cret-of-job-7".toByteArray()

    test("a client with the server's secret is served, on every connection (also after a reconnect)") {
        TcpStoreServer.start(port = 0, host = "127.0.0.1", secret = secret).use { server ->
            server.hasSecret shouldBe true
            TcpStore.connect("127.0.0.1", server.port, 10.seconds, secret).use { s ->
                s.set("k", "v".toByteArray())
                s.get("k").decodeToString() shouldBe "v"
                s.add("n", 2) shouldBe 2
            }
            TcpStore.connect("127.0.0.1", server.port, 10.seconds, secret).use { s -> s.get("k").decodeToString() shouldBe "v" }
        }
    }

    test("a client without the secret, or with another, is refused within its timeout, told why") {
        TcpStoreServer.start(port = 0, host = "127.0.0.1", secret = secret).use { server ->
            val started = System.nanoTime()
            val none = shouldThrow<StoreConnectionException> { TcpStore.connect("127.0.0.1", server.port, 1.seconds) }
            none.message shouldContain "TPCOMM_STORE_SECRET"
            val other = shouldThrow<StoreConnectionException> { TcpStore.connect("127.0.0.1", server.port, 1.seconds, "wrong".toByteArray()) }
            other.message shouldContain "another secret"
            ((System.nanoTime() - started) / 1_000_000) shouldBeLessThan 5_000L
        }
    }

    test("a server with a secret serves nothing before the proof: a raw request after VALIDATE closes the connection") {
        TcpStoreServer.start(port = 0, host = "127.0.0.1", secret = secret).use { server ->
            RawClient(server.port).use { c ->
                c.validate()
                c.send(msg { u8(StoreProtocol.SET); str("/k"); str("v") })
                c.closedWithin(2000) shouldBe true
            }
            RawClient(server.port).use { c ->
                c.validate()
                c.send(msg { u8(StoreSecret.AUTH); bytes(ByteArray(0)) })
                c.readBytes().size shouldBe StoreSecret.BYTES
                c.send(msg { u8(StoreSecret.AUTH); bytes(ByteArray(StoreSecret.BYTES)) }) // a wrong answer
                c.closedWithin(2000) shouldBe true
            }
        }
    }

    test("a client with a secret against a server without one (PyTorch's has none) is refused, told why") {
        TcpStoreServer.start(port = 0, host = "127.0.0.1").use { server ->
            val e = shouldThrow<StoreConnectionException> { TcpStore.connect("127.0.0.1", server.port, 1.seconds, secret) }
            e.message shouldContain "or none"
        }
    }

    test("the secret from the environment: the variable, a file (without its final newline), empty refused") {
        StoreRendezvous.secret(emptyMap()) shouldBe null
        StoreRendezvous.secret(mapOf("TPCOMM_STORE_SECRET" to "abc"))!!.decodeToString() shouldBe "abc"
        val f = Files.createTempFile("tpcomm-secret", "")
        try {
            Files.writeString(f, "from-file\n")
            StoreRendezvous.secret(mapOf("TPCOMM_STORE_SECRET_FILE" to f.toString()))!!.decodeToString() shouldBe "from-file"
            Files.writeString(f, "\n")
            shouldThrow<IllegalArgumentException> { StoreRendezvous.secret(mapOf("TPCOMM_STORE_SECRET_FILE" to f.toString())) }.message shouldContain "empty"
        } finally {
            Files.deleteIfExists(f)
        }
        shouldThrow<IllegalArgumentException> { StoreRendezvous.secret(mapOf("TPCOMM_STORE_SECRET" to "")) }.message shouldContain "empty"
        shouldThrow<IllegalArgumentException> { StoreRendezvous.secret(mapOf("TPCOMM_STORE_SECRET_FILE" to "/nonexistent/secret")) }.message shouldContain "cannot be read"
    }

    test("env:// with a secret: rank 0 hosts a server that asks it, the ranks that have it join") {
        val port = java.net.ServerSocket(0).use { it.localPort }
        val env = mapOf("MASTER_ADDR" to "127.0.0.1", "MASTER_PORT" to "$port")
        val address = StoreRendezvous.address("env://", env)
        StoreRendezvous.connect(address, 0, 10.seconds, secret).use { r0 ->
            StoreRendezvous.connect(address, 1, 10.seconds, secret).use { r1 ->
                r0.set("x", "1".toByteArray())
                r1.get("x").decodeToString() shouldBe "1"
            }
            shouldThrow<StoreConnectionException> { StoreRendezvous.connect(address, 1, 1.seconds, null) }
        }
    }
})
