package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.types.shouldBeInstanceOf
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import java.nio.file.Files
import java.util.concurrent.TimeoutException
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

class FileStoreTest : FunSpec({
    test("set, get, add and await across threads") {
        val store = FileStore(Files.createTempDirectory("tpcomm-store").resolve("sub/store"))
        store.get("a") shouldBe null
        store.set("a", byteArrayOf(1, 2, 3))
        store.get("a")!!.toList() shouldBe listOf<Byte>(1, 2, 3)
        store.set("a", byteArrayOf(9))
        store.get("a")!!.toList() shouldBe listOf<Byte>(9)
        coroutineScope {
            (1..8).map { async(Dispatchers.IO) { store.add("n", 1) } }.awaitAll().sorted() shouldBe (1L..8L).toList()
            val waiter = async(Dispatchers.IO) { store.await("late", 5.seconds) }
            delay(50)
            store.set("late", "x".encodeToByteArray())
            waiter.await().decodeToString() shouldBe "x"
        }
        shouldThrow<TimeoutException> { store.await("never", 100.milliseconds) }.message shouldContain "never"
        shouldThrow<IllegalArgumentException> { store.set("bad\tkey", ByteArray(0)) }
    }

    test("the file rendezvous hands rank 0's id to every rank, and refuses a stale file") {
        val path = Files.createTempDirectory("tpcomm-rdv").resolve("rdv")
        val config = CommConfig(worldSize = 3, timeout = 5.seconds, rendezvous = path.toUri().toString())
        val id = ByteArray(NcclConnector.UNIQUE_ID_BYTES) { it.toByte() }
        val got = coroutineScope {
            (0 until 3).map { r ->
                async(Dispatchers.IO) {
                    val (channel, owned) = BootstrapChannel.fromConfig(config.copy(rank = r))
                    owned shouldBe null
                    channel.shouldBeInstanceOf<FileStoreBootstrap>()
                    if (r != 0) delay(20) else delay(100)
                    channel.shareUniqueId(r, if (r == 0) id else null)
                }
            }.awaitAll()
        }
        got.forEach { it.toList() shouldBe id.toList() }
        // A second process reusing the file would read the old id: a fresh rank 0 refuses the stale key.
        val stale = FileStoreBootstrap(FileStore(path.resolveSibling("stale")), 2, 1.seconds)
        FileStore(path.resolveSibling("stale")).set("tpcomm/nccl/uniqueId/0", id)
        shouldThrow<IllegalStateException> { stale.shareUniqueId(0, id) }.message shouldContain "delete it or use a fresh path"
    }

    test("rendezvous selection: world of one needs none; several ranks without one are told what to set") {
        BootstrapChannel.fromConfig(CommConfig(), env = emptyMap()).second shouldBe null
        shouldThrow<IllegalArgumentException> { BootstrapChannel.fromConfig(CommConfig(worldSize = 2), env = emptyMap()) }
            .message shouldContain "set CommConfig.rendezvous"
        shouldThrow<IllegalArgumentException> { BootstrapChannel.fromConfig(CommConfig(worldSize = 2, rendezvous = "udp://x"), env = emptyMap()) }
            .message shouldContain "unknown rendezvous"
        shouldThrow<IllegalArgumentException> { BootstrapChannel.fromConfig(CommConfig(worldSize = 2, rendezvous = "tcp://x"), env = emptyMap()) }
            .message shouldContain "tcp://host:port"
        shouldThrow<IllegalArgumentException> { BootstrapChannel.fromConfig(CommConfig(worldSize = 2, rendezvous = "env://"), env = emptyMap()) }
            .message shouldContain "MASTER_ADDR"
        // "mpi" creates an MPI communicator through ServiceLoader; without comm-mpi on the classpath that is a clear error.
        shouldThrow<dev.tpcomm.BackendUnavailableException> { BootstrapChannel.fromConfig(CommConfig(worldSize = 2, rendezvous = "mpi"), env = emptyMap()) }
            .message shouldContain "comm-mpi"
    }

    test("the file store behind the Store API: the same operations as the TCP store") {
        val s = FileStore(Files.createTempDirectory("tpcomm-store").resolve("api")).asStore(5.seconds)
        s.set("a", "1".encodeToByteArray())
        s.get("a").decodeToString() shouldBe "1"
        s.add("n", 5) shouldBe 5
        s.add("n", 7) shouldBe 12
        s.get("n").decodeToString() shouldBe "12"
        s.compareSet("c", ByteArray(0), "x".encodeToByteArray()).decodeToString() shouldBe "x"
        s.compareSet("c", "y".encodeToByteArray(), "z".encodeToByteArray()).decodeToString() shouldBe "x"
        s.compareSet("c", "x".encodeToByteArray(), "z".encodeToByteArray()).decodeToString() shouldBe "z"
        s.compareSet("missing", "e".encodeToByteArray(), "d".encodeToByteArray()).decodeToString() shouldBe "e"
        s.check(listOf("a", "n")) shouldBe true
        s.check(listOf("missing")) shouldBe false
        s.append("ap", "he".encodeToByteArray())
        s.append("ap", "llo".encodeToByteArray())
        s.get("ap").decodeToString() shouldBe "hello"
        s.multiSet(mapOf("m1" to "one".encodeToByteArray(), "m2" to "two".encodeToByteArray()))
        s.multiGet(listOf("m2", "m1")).map { it.decodeToString() } shouldBe listOf("two", "one")
        s.numKeys() shouldBe 6L
        s.delete("a") shouldBe true
        s.delete("a") shouldBe false
        s.check(listOf("a")) shouldBe false
        s.numKeys() shouldBe 5L
        s.withPrefix("pg").set("k", "v".encodeToByteArray())
        s.get("pg/k").decodeToString() shouldBe "v"
        coroutineScope {
            val waiter = async(Dispatchers.IO) { s.get("late", 5.seconds) }
            delay(50)
            s.set("late", "x".encodeToByteArray())
            waiter.await().decodeToString() shouldBe "x"
        }
        shouldThrow<dev.tpcomm.store.StoreTimeoutException> { s.wait(listOf("never"), 100.milliseconds) }.message shouldContain "never"
    }
})
