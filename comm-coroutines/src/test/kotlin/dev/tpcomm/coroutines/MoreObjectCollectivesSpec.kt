package dev.tpcomm.coroutines

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.gatherObject
import dev.tpcomm.recvObject
import dev.tpcomm.scatterObject
import dev.tpcomm.sendObject
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import kotlinx.serialization.Serializable
import kotlin.time.Duration.Companion.seconds

@Serializable
data class Shard(val rank: Int, val rows: List<String>)

/** gatherObject, scatterObject and sendObject/recvObject on the local backend, as a user writes them. */
class MoreObjectCollectivesSpec : FunSpec({
    val config = CommConfig(timeout = 10.seconds)
    fun shard(r: Int) = Shard(r, List(r * 50) { "row $it of rank $r" })

    test("gatherObject of objects of very different sizes: the list on the root, null elsewhere") {
        val results = runLocalWorld(4, config) { comm -> comm.gatherObject(shard(comm.rank), root = 2) }
        results shouldBe listOf(null, null, List(4) { shard(it) }, null)
    }

    test("scatterObject gives each rank its element") {
        val results = runLocalWorld(3, config) { comm ->
            comm.scatterObject(if (comm.rank == 0) List(3) { shard(it + 10) } else null, root = 0)
        }
        results shouldBe List(3) { shard(it + 10) }
    }

    test("scatterObject with the wrong number of objects: IllegalArgumentException on the root, a named CommunicationException elsewhere, at once") {
        val world = LocalWorld(3, config)
        val t0 = System.nanoTime()
        val outcomes = coroutineScope {
            (0 until 3).map { r ->
                async {
                    runCatching { world.communicator(r).scatterObject(if (r == 1) listOf("a", "b") else null, root = 1) }.exceptionOrNull()
                }
            }.map { it.await() }
        }
        ((System.nanoTime() - t0) / 1e9 < 5.0) shouldBe true
        (outcomes[1] is IllegalArgumentException) shouldBe true
        outcomes[1]!!.message!! shouldContain "one value per rank (3), got 2"
        for (r in listOf(0, 2)) {
            val e = outcomes[r] as CommunicationException
            e.operation shouldBe "scatterObject"
            e.rank shouldBe r
            e.message!! shouldContain "the root rank 1 passed a wrong argument"
        }
        // Nothing was left half-done: the world still works.
        coroutineScope {
            (0 until 3).map { r -> async { world.communicator(r).gatherObject(r, root = 0) } }.map { it.await() }
        } shouldBe listOf(listOf(0, 1, 2), null, null)
    }

    test("sendObject/recvObject: successive objects from one rank arrive in order, with tags and ANY_SOURCE") {
        val results = runLocalWorld(2, config) { comm ->
            if (comm.rank == 0) {
                comm.sendObject(shard(3), dst = 1, tag = 4)
                comm.sendObject(mapOf("step" to 12L), dst = 1, tag = 4)
                null
            } else {
                listOf(comm.recvObject<Shard>(src = dev.tpcomm.Communicator.ANY_SOURCE, tag = 4), comm.recvObject<Map<String, Long>>(src = 0, tag = 4))
            }
        }
        results[1] shouldBe listOf(shard(3), mapOf("step" to 12L))
    }

    test("recvObject of bytes that are not the expected type is a CommunicationException naming the sender") {
        val e = shouldThrow<CommunicationException> {
            runLocalWorld(2, config) { comm ->
                if (comm.rank == 0) comm.sendObject("not a shard", dst = 1) else comm.recvObject<Shard>(src = 0)
            }
        }
        e.operation shouldBe "recvObject"
        e.message!! shouldContain "rank 0"
    }
})
