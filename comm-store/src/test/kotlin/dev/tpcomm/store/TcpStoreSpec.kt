package dev.tpcomm.store

import dev.tpcomm.store.RawClient.Companion.msg
import dev.tpcomm.store.RawClient.Companion.str
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainExactlyInAnyOrder
import io.kotest.matchers.longs.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.withContext
import kotlinx.coroutines.withTimeout
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds
import kotlin.time.measureTime

/** tpcomm's client against tpcomm's server, over real sockets. */
class TcpStoreSpec : FunSpec({
    fun ByteArray.text() = decodeToString()

    test("every operation answers as PyTorch's server does") {
        TcpStoreServer.start(port = 0, host = "127.0.0.1").use { server ->
            TcpStore.connect("127.0.0.1", server.port, 10.seconds).use { s ->
                s.set("a", "1".toByteArray())
                s.get("a").text() shouldBe "1"
                s.add("n", 5) shouldBe 5
                s.add("n", 7) shouldBe 12
                s.get("n").text() shouldBe "12"
                s.compareSet("c", ByteArray(0), "x".toByteArray()).text() shouldBe "x"   // missing + empty expected: stores
                s.compareSet("c", "y".toByteArray(), "z".toByteArray()).text() shouldBe "x" // mismatch: current value
                s.compareSet("c", "x".toByteArray(), "z".toByteArray()).text() shouldBe "z"
                s.compareSet("missing", "e".toByteArray(), "d".toByteArray()).text() shouldBe "e" // PyTorch's quirk
                s.check(listOf("missing")) shouldBe false
                s.check(listOf("a", "n")) shouldBe true
                s.append("ap", "he".toByteArray())
                s.append("ap", "llo".toByteArray())
                s.get("ap").text() shouldBe "hello"
                s.multiSet(mapOf("m1" to "one".toByteArray(), "m2" to "two".toByteArray()))
                s.multiGet(listOf("m2", "m1")).map { it.text() } shouldBe listOf("two", "one")
                s.numKeys() shouldBe 6L
                s.delete("a") shouldBe true
                s.delete("a") shouldBe false
                s.numKeys() shouldBe 5L
                s.listKeys() shouldContainExactlyInAnyOrder listOf("n", "c", "ap", "m1", "m2")
                s.ping(1234)
                s.queuePush("q", "v1".toByteArray())
                s.queuePush("q", "v2".toByteArray())
                s.queueLen("q") shouldBe 2L
                s.queuePop("q").text() shouldBe "v1"
                s.queuePop("q").text() shouldBe "v2"
                val p = s.withPrefix("pg")
                p.set("k", "v".toByteArray())
                s.get("pg/k").text() shouldBe "v"
                p.withPrefix("sub").add("c", 2) shouldBe 2
                s.get("pg/sub/c").text() shouldBe "2"
            }
        }
    }

    test("keys travel with PyTorch's '/' prefix, byte for byte") {
        TcpStoreServer.start(port = 0, host = "127.0.0.1").use { server ->
            TcpStore.connect("127.0.0.1", server.port, 10.seconds).use { s ->
                s.set("key", byteArrayOf(1, 2, 3))
                RawClient(server.port).use { raw ->
                    raw.validate()
                    raw.send(msg { u8(StoreProtocol.GET); str("/key") })
                    raw.readBytes().toList() shouldBe listOf<Byte>(1, 2, 3)
                    raw.send(msg { u8(StoreProtocol.GET); str("key") }) // without the prefix: another key
                    raw.readBytes().size shouldBe 0
                    raw.send(msg { u8(StoreProtocol.PING); u32(0x01020304) })
                    raw.readU32() shouldBe 0x01020304
                }
            }
        }
    }

    test("wait: a key set later wakes the waiter; a timeout cancels the wait and the connection stays usable") {
        TcpStoreServer.start(port = 0, host = "127.0.0.1").use { server ->
            TcpStore.connect("127.0.0.1", server.port, 10.seconds).use { s ->
                TcpStore.connect("127.0.0.1", server.port, 10.seconds).use { other ->
                    coroutineScope {
                        launch { delay(100); other.set("late", "v".toByteArray()) }
                        s.get("late", 5.seconds).text() shouldBe "v"
                    }
                }
                val took = measureTime {
                    val e = shouldThrow<StoreTimeoutException> { s.wait(listOf("never"), 300.milliseconds) }
                    e.message shouldContain "'never'"
                }
                took.inWholeMilliseconds shouldBeLessThan 3000
                s.set("after", "ok".toByteArray())          // CANCEL_WAIT kept the connection in step
                s.get("after").text() shouldBe "ok"
                s.check(listOf("never")) shouldBe false
            }
        }
    }

    test("a cancelled call returns at once and the store reconnects for the next call") {
        TcpStoreServer.start(port = 0, host = "127.0.0.1").use { server ->
            TcpStore.connect("127.0.0.1", server.port, 30.seconds).use { s ->
                val took = measureTime {
                    shouldThrow<kotlinx.coroutines.TimeoutCancellationException> {
                        withTimeout(200.milliseconds) { s.wait(listOf("never")) }
                    }
                }
                took.inWholeMilliseconds shouldBeLessThan 3000
                s.set("k", "v".toByteArray())
                s.get("k").text() shouldBe "v"
            }
        }
    }

    test("init/ worker counting: registerWorker and waitForWorkers") {
        TcpStoreServer.start(port = 0, host = "127.0.0.1").use { server ->
            val stores = List(3) { TcpStore.connect("127.0.0.1", server.port, 10.seconds) }
            try {
                shouldThrow<StoreTimeoutException> { stores[0].waitForWorkers(3, 100.milliseconds) }.message shouldContain "0 of 3"
                stores.map { it.registerWorker() }.sorted() shouldBe listOf(1L, 2L, 3L)
                stores[0].waitForWorkers(3, 5.seconds)
                stores[0].listKeys() shouldBe listOf("init/")
            } finally {
                stores.forEach { it.close() }
            }
        }
    }

    test("the client retries until the server starts, and names the address when none does") {
        val port = java.net.ServerSocket(0).use { it.localPort }
        coroutineScope {
            val late = async(Dispatchers.IO) { delay(500); TcpStoreServer.start(port = port, host = "127.0.0.1") }
            TcpStore.connect("127.0.0.1", port, 10.seconds).use { it.set("k", "v".toByteArray()) }
            late.await().close()
        }
        val took = measureTime {
            val e = shouldThrow<StoreConnectionException> { TcpStore.connect("127.0.0.1", port, 700.milliseconds) }
            e.message shouldContain "127.0.0.1:$port"
        }
        took.inWholeMilliseconds shouldBeLessThan 5000
    }

    test("the server goes away: the caller gets StoreConnectionException at once, and later calls too") {
        val server = TcpStoreServer.start(port = 0, host = "127.0.0.1")
        TcpStore.connect("127.0.0.1", server.port, 30.seconds).use { s ->
            s.set("k", "v".toByteArray())
            coroutineScope {
                val waiting = async { runCatching { s.wait(listOf("never")) } }
                delay(200)
                val took = measureTime {
                    server.close()
                    val e = waiting.await().exceptionOrNull()
                    (e is StoreConnectionException) shouldBe true
                }
                took.inWholeMilliseconds shouldBeLessThan 5000
            }
            val took = measureTime { shouldThrow<StoreConnectionException> { s.get("k") } }
            took.inWholeMilliseconds shouldBeLessThan 1000
        }
    }

    test("the port is taken: start names the port") {
        TcpStoreServer.start(port = 0, host = "127.0.0.1").use { first ->
            val e = shouldThrow<StoreException> { TcpStoreServer.start(port = first.port, host = "127.0.0.1") }
            e.message shouldContain "port ${first.port}"
        }
    }

    test("garbage, a missing VALIDATE, an unknown code and values over the limits close only that connection") {
        TcpStoreServer.start(port = 0, host = "127.0.0.1").use { server ->
            TcpStore.connect("127.0.0.1", server.port, 10.seconds).use { good ->
                good.set("k", "v".toByteArray())
                val attacks = listOf(
                    "no VALIDATE first" to msg { u8(StoreProtocol.GET); str("/k") },
                    "wrong magic" to msg { u8(0); u32(0x12345678) },
                    "random bytes" to ByteArray(64) { (it * 37 + 11).toByte() },
                    "unknown code" to msg { u8(0); u32(0x3C85F7CE); u8(99) },
                    "9 MiB value" to msg { u8(0); u32(0x3C85F7CE); u8(StoreProtocol.SET); str("/big"); i64(9L * 1024 * 1024) },
                    "9 KiB key" to msg { u8(0); u32(0x3C85F7CE); u8(StoreProtocol.GET); i64(9L * 1024) },
                    "too many keys" to msg { u8(0); u32(0x3C85F7CE); u8(StoreProtocol.WAIT); i64(200_000) },
                )
                for ((what, bytes) in attacks) {
                    RawClient(server.port).use { raw ->
                        raw.send(bytes)
                        withContext(Dispatchers.IO) { raw.closedWithin(3000) } shouldBe true
                    }
                    good.get("k").text() shouldBe "v"
                }
                // A whole 9 MiB value on the wire, as a client would send it.
                RawClient(server.port).use { raw ->
                    raw.validate()
                    val big = msg { u8(StoreProtocol.SET); str("/big"); bytes(ByteArray(9 * 1024 * 1024)) }
                    runCatching { raw.send(big) }
                    withContext(Dispatchers.IO) { raw.closedWithin(3000) } shouldBe true
                }
                good.check(listOf("big")) shouldBe false
                good.get("k").text() shouldBe "v"
                shouldThrow<IllegalArgumentException> { good.set("big", ByteArray(9 * 1024 * 1024)) }.message shouldContain "8 MiB"
                val exactly8 = ByteArray(8 * 1024 * 1024) { it.toByte() }
                good.set("big8", exactly8)
                good.get("big8").contentEquals(exactly8) shouldBe true
            }
        }
    }

    test("1,024 clients at once") {
        TcpStoreServer.start(port = 0, host = "127.0.0.1").use { server ->
            val n = 1024
            val stores = withContext(Dispatchers.IO) {
                (0 until n).map { async { TcpStore.connect("127.0.0.1", server.port, 60.seconds) } }.awaitAll()
            }
            try {
                server.connectionCount shouldBe n
                withContext(Dispatchers.IO) {
                    stores.mapIndexed { i, s -> async { s.set("k$i", "$i".toByteArray()); s.add("count", 1) } }.awaitAll()
                }
                stores[0].get("count").text() shouldBe "$n"
                stores[n - 1].get("k0").text() shouldBe "0"
                stores[0].numKeys() shouldBe (n + 1).toLong()
            } finally {
                stores.forEach { it.close() }
            }
        }
    }

    test("a get whose own timeout is longer than the store's: the GET after the wait gets a fresh deadline") {
        TcpStoreServer.start(port = 0, host = "127.0.0.1").use { server ->
            TcpStore.connect("127.0.0.1", server.port, 400.milliseconds).use { s ->
                TcpStore.connect("127.0.0.1", server.port, 10.seconds).use { other ->
                    coroutineScope {
                        launch { delay(900); other.set("slow", "v".toByteArray()) }
                        s.get("slow", 5.seconds).text() shouldBe "v"
                    }
                    s.multiGet(listOf("slow"), 5.seconds).single().text() shouldBe "v"
                }
            }
        }
    }

    test("rank 0 binds the interface MASTER_ADDR names when it is this host's, every interface otherwise") {
        StoreRendezvous.bindHost("127.0.0.1") shouldBe "127.0.0.1"
        StoreRendezvous.bindHost("localhost") shouldBe "localhost"
        StoreRendezvous.bindHost("192.0.2.1") shouldBe null // TEST-NET-1: never this host's
        val local = java.net.NetworkInterface.networkInterfaces().toList().flatMap { it.inetAddresses().toList() }
            .firstOrNull { !it.isLoopbackAddress && it is java.net.Inet4Address }
        if (local != null) StoreRendezvous.bindHost(local.hostAddress) shouldBe local.hostAddress
        StoreRendezvous.address("env://", mapOf("MASTER_ADDR" to "10.1.2.3")) shouldBe StoreRendezvous.Address("10.1.2.3", 29500, false, null)
        StoreRendezvous.address("env://", mapOf("PET_MASTER_ADDR" to "svc", "PET_MASTER_PORT" to "23456")).port shouldBe 23456
        StoreRendezvous.address("tcp://h:1234", emptyMap()) shouldBe StoreRendezvous.Address("h", 1234, false, null)
        shouldThrow<IllegalArgumentException> { StoreRendezvous.address("env://", emptyMap()) }.message shouldContain "MASTER_ADDR"
        shouldThrow<IllegalArgumentException> { StoreRendezvous.address("env://", mapOf("MASTER_ADDR" to "h", "MASTER_PORT" to "x")) }.message shouldContain "MASTER_PORT"
    }
})
