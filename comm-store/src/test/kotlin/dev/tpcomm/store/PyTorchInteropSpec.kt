package dev.tpcomm.store

import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainAll
import io.kotest.matchers.longs.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import kotlinx.coroutines.withContext
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds
import kotlin.time.measureTime

/**
 * tpcomm's client against PyTorch's own TCPStore server (libuv, libtorch 2.10), and PyTorch's
 * client against tpcomm's server, in one JVM through the JavaCPP preset, over real sockets.
 */
class PyTorchInteropSpec : FunSpec({
    fun ByteArray.text() = decodeToString()
    fun b(s: String) = s.toByteArray()

    test("PyTorch's server, tpcomm's client: every operation both have, and PyTorch sees the same keys") {
        PyTorchStore.server().use { torch ->
            torch.isLibUv shouldBe true
            TcpStore.connect("127.0.0.1", torch.port, 10.seconds).use { s ->
                s.ping(4242)
                s.set("a", b("1"))
                torch.get("a").text() shouldBe "1"
                torch.set("fromTorch", b("hi"))
                s.get("fromTorch").text() shouldBe "hi"
                s.add("n", 5) shouldBe 5
                torch.add("n", 7) shouldBe 12
                s.get("n").text() shouldBe "12"
                s.compareSet("c", ByteArray(0), b("x")).text() shouldBe "x"
                s.compareSet("c", b("y"), b("z")).text() shouldBe "x"
                s.compareSet("missing", b("e"), b("d")).text() shouldBe "e"
                torch.compareSet("c", b("x"), b("w")).text() shouldBe "w"
                s.get("c").text() shouldBe "w"
                s.check(listOf("a", "n")) shouldBe true
                s.check(listOf("a", "nope")) shouldBe false
                torch.check(listOf("a", "n")) shouldBe true
                // APPEND and QUEUE_PUSH have no reply (TCPStore.cpp, TCPStore::append and ::queuePush):
                // one has landed once a later request on the same connection is answered, so each
                // is read back there before the other connection writes, or they land in either order.
                s.append("ap", b("he"))
                s.get("ap").text() shouldBe "he"
                torch.append("ap", b("ll"))
                torch.get("ap").text() shouldBe "hell"
                s.append("ap", b("o"))
                s.get("ap").text() shouldBe "hello"
                torch.get("ap").text() shouldBe "hello"
                s.multiSet(mapOf("m1" to b("one"), "m2" to b("two")))
                torch.get("m2").text() shouldBe "two"
                s.multiGet(listOf("m2", "m1", "fromTorch")).map { it.text() } shouldBe listOf("two", "one", "hi")
                val n = s.numKeys()
                torch.numKeys() shouldBe n
                s.delete("a") shouldBe true
                torch.delete("a") shouldBe false
                s.numKeys() shouldBe n - 1
                s.listKeys() shouldContainAll listOf("fromTorch", "n", "c", "ap", "m1", "m2")
                torch.listKeys() shouldContainAll listOf("fromTorch", "n") // PyTorch's client strips its "/" too
                s.queuePush("q", b("v1"))
                s.queueLen("q") shouldBe 1L
                torch.queuePush("q", b("v2"))
                torch.queueLen("q") shouldBe 2L
                s.queueLen("q") shouldBe 2L
                torch.queuePop("q").text() shouldBe "v1"
                s.queuePop("q").text() shouldBe "v2"
                s.withPrefix("default_pg").set("0", b("id"))
                torch.get("default_pg/0").text() shouldBe "id"
            }
        }
    }

    test("PyTorch's server: a timed-out wait is cancelled with CANCEL_WAIT and the connection stays in step") {
        PyTorchStore.server().use { torch ->
            TcpStore.connect("127.0.0.1", torch.port, 10.seconds).use { s ->
                val took = measureTime { shouldThrow<StoreTimeoutException> { s.wait(listOf("never"), 300.milliseconds) } }
                took.inWholeMilliseconds shouldBeLessThan 3000
                coroutineScope {
                    val waiter = async { s.get("late", 5.seconds) }
                    delay(100)
                    torch.set("late", b("v"))
                    waiter.await().text() shouldBe "v"
                }
                s.set("after", b("ok"))
                torch.get("after").text() shouldBe "ok"
            }
        }
    }

    test("PyTorch's server with world_size 3: tpcomm's clients count themselves in init/ and waitForWorkers returns") {
        PyTorchStore.server(workers = 3).use { torch ->
            val stores = List(2) { TcpStore.connect("127.0.0.1", torch.port, 10.seconds) }
            try {
                val host = Thread { torch.waitForWorkers() }.apply { start() } // the server's own worker, as rank 0
                stores.forEach { it.registerWorker() }
                host.join(10_000)
                host.isAlive shouldBe false
                stores[1].waitForWorkers(3, 5.seconds)
                stores[0].listKeys() shouldContainAll listOf("init/")
            } finally {
                stores.forEach { it.close() }
            }
        }
    }

    test("PyTorch's server: a 9 MiB value closes only that connection; garbage too") {
        PyTorchStore.server().use { torch ->
            TcpStore.connect("127.0.0.1", torch.port, 10.seconds).use { good ->
                good.set("k", b("v"))
                RawClient(torch.port).use { raw ->
                    raw.validate()
                    runCatching { raw.send(RawClient.msg { u8(StoreProtocol.SET); bytes(b("/big")); bytes(ByteArray(9 * 1024 * 1024)) }) }
                    withContext(Dispatchers.IO) { raw.closedWithin(5000) } shouldBe true
                }
                RawClient(torch.port).use { raw ->
                    raw.validate()
                    raw.send(RawClient.msg { u8(99) })
                    withContext(Dispatchers.IO) { raw.closedWithin(5000) } shouldBe true
                }
                good.get("k").text() shouldBe "v"
                good.check(listOf("big")) shouldBe false
            }
        }
    }

    test("PyTorch's server goes away: tpcomm's waiting client gets StoreConnectionException") {
        val torch = PyTorchStore.server()
        TcpStore.connect("127.0.0.1", torch.port, 30.seconds).use { s ->
            coroutineScope {
                val waiting = async { runCatching { s.wait(listOf("never")) } }
                delay(200)
                val took = measureTime {
                    withContext(Dispatchers.IO) { torch.close() }
                    (waiting.await().exceptionOrNull() is StoreConnectionException) shouldBe true
                }
                took.inWholeMilliseconds shouldBeLessThan 10_000
            }
        }
    }

    test("tpcomm's server, PyTorch's client: every operation both have, and tpcomm sees the same keys") {
        TcpStoreServer.start(port = 0).use { server ->
            PyTorchStore.client(server.port).use { torch ->
                TcpStore.connect("127.0.0.1", server.port, 10.seconds).use { s ->
                    torch.set("a", b("1"))
                    s.get("a").text() shouldBe "1"
                    s.set("fromTpcomm", b("hi"))
                    torch.get("fromTpcomm").text() shouldBe "hi"
                    torch.add("n", 5) shouldBe 5
                    s.add("n", 7) shouldBe 12
                    torch.get("n").text() shouldBe "12"
                    torch.compareSet("c", ByteArray(0), b("x")).text() shouldBe "x"
                    torch.compareSet("c", b("y"), b("z")).text() shouldBe "x"
                    torch.compareSet("missing", b("e"), b("d")).text() shouldBe "e"
                    torch.compareSet("c", b("x"), b("w")).text() shouldBe "w"
                    s.get("c").text() shouldBe "w"
                    torch.check(listOf("a", "n")) shouldBe true
                    torch.check(listOf("a", "nope")) shouldBe false
                    torch.append("ap", b("he"))
                    // APPEND has no reply (TCPStore.cpp, TCPStore::append): wait until the server has it
                    // before appending from another connection, or the two may land in either order.
                    s.get("ap").text() shouldBe "he"
                    s.append("ap", b("llo"))
                    torch.get("ap").text() shouldBe "hello"
                    torch.wait(listOf("a", "n"), 1000)
                    val n = torch.numKeys()
                    s.numKeys() shouldBe n
                    torch.delete("a") shouldBe true
                    torch.delete("a") shouldBe false
                    torch.numKeys() shouldBe n - 1
                    torch.listKeys() shouldContainAll listOf("fromTpcomm", "n", "c", "ap")
                    // QUEUE_PUSH has no reply either (TCPStore.cpp, TCPStore::queuePush): a push is
                    // known to have landed only once a later request on the same connection is answered.
                    torch.queuePush("q", b("v1"))
                    torch.queueLen("q") shouldBe 1L
                    s.queuePush("q", b("v2"))
                    s.queueLen("q") shouldBe 2L
                    torch.queueLen("q") shouldBe 2L
                    s.queuePop("q").text() shouldBe "v1"
                    torch.queuePop("q").text() shouldBe "v2"
                }
            }
        }
    }

    test("tpcomm's server: PyTorch's timed-out wait sends CANCEL_WAIT and its connection stays usable") {
        TcpStoreServer.start(port = 0).use { server ->
            PyTorchStore.client(server.port).use { torch ->
                val took = measureTime {
                    val e = shouldThrow<RuntimeException> { torch.wait(listOf("never"), 300) }
                    e.message shouldContain "timeout"
                }
                took.inWholeMilliseconds shouldBeLessThan 3000
                torch.set("after", b("ok"))
                torch.get("after").text() shouldBe "ok"
                TcpStore.connect("127.0.0.1", server.port, 10.seconds).use { s ->
                    val waiter = Thread { torch.wait(listOf("late"), 5000) }.apply { start() }
                    delay(100)
                    s.set("late", b("v"))
                    withContext(Dispatchers.IO) { waiter.join(5000) }
                    waiter.isAlive shouldBe false
                }
            }
        }
    }

    test("tpcomm's server: PyTorch's clients with world_size count themselves in init/; tpcomm waits for them") {
        TcpStoreServer.start(port = 0).use { server ->
            TcpStore.connect("127.0.0.1", server.port, 10.seconds).use { host ->
                val clients = List(3) { PyTorchStore.client(server.port, workers = 3, waitWorkers = true) }
                try {
                    host.waitForWorkers(3, 5.seconds)
                    shouldThrow<StoreTimeoutException> { host.waitForWorkers(4, 100.milliseconds) }.message shouldContain "3 of 4"
                } finally {
                    clients.forEach { it.close() }
                }
                host.listKeys() shouldBe listOf("init/")
            }
        }
    }

    test("tpcomm's server: PyTorch's client sending a 9 MiB value loses only its own connection") {
        TcpStoreServer.start(port = 0).use { server ->
            TcpStore.connect("127.0.0.1", server.port, 10.seconds).use { good ->
                good.set("k", b("v"))
                PyTorchStore.client(server.port).use { torch ->
                    runCatching { torch.set("big", ByteArray(9 * 1024 * 1024)) }
                    val e = runCatching { torch.get("k") }.exceptionOrNull()
                    (e != null) shouldBe true
                }
                good.get("k").text() shouldBe "v"
                good.check(listOf("big")) shouldBe false
            }
        }
    }

    test("1,024 PyTorch clients on tpcomm's server, and 1,024 tpcomm clients on PyTorch's server") {
        val t0 = System.nanoTime()
        TcpStoreServer.start(port = 0).use { server ->
            val clients = withContext(Dispatchers.IO) {
                (0 until 1024).map { async { PyTorchStore.client(server.port).also { it.add("count", 1) } } }.awaitAll()
            }
            try {
                server.connectionCount shouldBe 1024
                clients[0].get("count").text() shouldBe "1024"
            } finally {
                withContext(Dispatchers.IO) { clients.forEach { it.close() } }
            }
        }
        val t1 = System.nanoTime()
        PyTorchStore.server().use { torch ->
            println("1,024 PyTorch clients on tpcomm's server: ${(t1 - t0) / 1_000_000} ms")
            val stores = withContext(Dispatchers.IO) {
                (0 until 1024).map { async { TcpStore.connect("127.0.0.1", torch.port, 60.seconds).also { it.add("count", 1) } } }.awaitAll()
            }
            try {
                torch.get("count").text() shouldBe "1024"
            } finally {
                stores.forEach { it.close() }
            }
        }
    }

    test("the port is taken: by PyTorch's server for tpcomm's, and by tpcomm's for PyTorch's") {
        PyTorchStore.server().use { torch ->
            shouldThrow<StoreException> { TcpStoreServer.start(port = torch.port) }.message shouldContain "port ${torch.port}"
        }
        TcpStoreServer.start(port = 0).use { server ->
            shouldThrow<RuntimeException> { PyTorchStore.server(port = server.port) }
        }
    }
})
