package dev.tpcomm.coroutines.local

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.allGatherObject
import dev.tpcomm.broadcastObject
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.nulls.shouldBeNull
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.withContext
import kotlinx.serialization.Serializable

@Serializable
data class Note(val from: Int, val text: String)

class LocalCollectivesSpec : FunSpec({
    // rank r's tensor holds r * 10 + i at index i
    fun ranked(r: Int, n: Int, vararg shape: Int) = Tensor.of(FloatArray(n) { (r * 10 + it).toFloat() }, *shape)

    for (world in listOf(1, 2, 3, 4)) {
        test("allReduce sum, broadcast, reduce on $world ranks") {
            val out = runLocalWorld(world) { comm ->
                val t = ranked(comm.rank, 5)
                comm.allReduce(t)
                val b = ranked(comm.rank, 3)
                comm.broadcast(b, world - 1)
                val red = ranked(comm.rank, 4)
                comm.reduce(red, 0, ReduceOp.Max)
                Triple(t.toFloatArray().toList(), b.toFloatArray().toList(), red.toFloatArray().toList())
            }
            out.forEachIndexed { r, (sum, b, red) ->
                sum shouldBe List(5) { i -> (0 until world).sumOf { it * 10 + i }.toFloat() }
                b shouldBe List(3) { i -> ((world - 1) * 10 + i).toFloat() }
                red shouldBe if (r == 0) List(4) { i -> ((world - 1) * 10 + i).toFloat() } else List(4) { i -> (r * 10 + i).toFloat() }
            }
        }
    }

    test("allGather along dim 0 and dim 1") {
        val out = runLocalWorld(3) { comm ->
            val t = ranked(comm.rank, 4, 2, 2)
            comm.allGather(t, 0).toFloatArray().toList() to comm.allGather(t, 1).toFloatArray().toList()
        }
        out.forEach { (d0, d1) ->
            d0 shouldBe (0 until 3).flatMap { r -> List(4) { (r * 10 + it).toFloat() } }
            // rows: [r0 row0, r1 row0, r2 row0], [r0 row1, ...]
            d1 shouldBe (0 until 2).flatMap { row -> (0 until 3).flatMap { r -> List(2) { c -> (r * 10 + row * 2 + c).toFloat() } } }
        }
    }

    test("reduceScatter along dim 0 and dim 1, into variant") {
        val w = 2
        val out = runLocalWorld(w) { comm ->
            val t = ranked(comm.rank, 8, 2, 4)
            val d0 = comm.reduceScatter(t, ReduceOp.Sum, 0).toFloatArray().toList()
            val into = Tensor.zeros(DType.Float32, 2, 2)
            comm.reduceScatterInto(into, t, ReduceOp.Sum, 1)
            d0 to into.toFloatArray().toList()
        }
        val sum = List(8) { i -> (0 until w).sumOf { it * 10 + i }.toFloat() }
        out.forEachIndexed { r, (d0, d1) ->
            d0 shouldBe sum.subList(r * 4, r * 4 + 4)
            d1 shouldBe listOf(sum[r * 2], sum[r * 2 + 1], sum[4 + r * 2], sum[4 + r * 2 + 1])
        }
    }

    test("gather, scatter and allToAll") {
        val w = 3
        val out = runLocalWorld(w) { comm ->
            val g = comm.gather(ranked(comm.rank, 2), 1)
            val s = Tensor.zeros(DType.Float32, 2)
            comm.scatter(s, if (comm.rank == 0) Tensor.of(FloatArray(6) { it.toFloat() }) else null, 0)
            val a2a = comm.allToAll(ranked(comm.rank, 3))
            Triple(g?.toFloatArray()?.toList(), s.toFloatArray().toList(), a2a.toFloatArray().toList())
        }
        out.forEachIndexed { r, (g, s, a) ->
            if (r == 1) g shouldBe listOf(0f, 1f, 10f, 11f, 20f, 21f) else g.shouldBeNull()
            s shouldBe listOf(2f * r, 2f * r + 1)
            a shouldBe List(3) { src -> (src * 10 + r).toFloat() }
        }
    }

    test("barrier, object collectives and split") {
        val out = runLocalWorld(4) { comm ->
            comm.barrier()
            val notes = comm.allGatherObject(Note(comm.rank, "hi ${comm.rank}"))
            val root = comm.broadcastObject(if (comm.rank == 2) Note(2, "root") else null, 2)
            val sub = comm.split(comm.rank % 2, key = -comm.rank)!!
            val t = Tensor.of(floatArrayOf(comm.rank.toFloat()))
            sub.allReduce(t)
            val none = comm.group(listOf(3, 1))
            val gRank = none?.rank
            none?.barrier()
            listOf(notes.map { it.from }, root.text, sub.rank, sub.worldSize, t.getFloat(0), gRank)
        }
        out.forEachIndexed { r, v ->
            v[0] shouldBe listOf(0, 1, 2, 3)
            v[1] shouldBe "root"
            v[2] shouldBe (if (r < 2) 1 else 0) // keys are -rank: higher rank first
            v[3] shouldBe 2
            v[4] shouldBe (if (r % 2 == 0) 2f else 4f)
            v[5] shouldBe when (r) { 3 -> 0; 1 -> 1; else -> null }
        }
    }

    test("plain threads with runBlocking drive the ranks") {
        dev.tpcomm.coroutines.LocalWorld(4).use { world ->
            val sums = java.util.concurrent.ConcurrentHashMap<Int, Long>()
            val threads = (0 until 4).map { r ->
                Thread {
                    kotlinx.coroutines.runBlocking {
                        var acc = 0L
                        repeat(500) { k ->
                            val t = Tensor.of(IntArray(1 + k % 3) { r })
                            acc += world.communicator(r).allReduce(t).getLong(0)
                        }
                        sums[r] = acc
                    }
                }.also { it.start() }
            }
            threads.forEach { it.join(30_000) }
            sums shouldBe (0 until 4).associateWith { 500L * 6 }
        }
    }

    test("runLocalWorld: a rank returning early makes a peer waiting for it fail fast") {
        val e = io.kotest.assertions.throwables.shouldThrow<dev.tpcomm.CommunicatorAbortedException> {
            runLocalWorld(2) { comm -> if (comm.rank == 0) comm.barrier() }
        }
        e.message!!.contains("closed") shouldBe true
    }

    test("Comm.create rejects a rank joining twice and a different world size") {
        val config = CommConfig(worldSize = 2, options = mapOf("local.world" to "spec-errors"))
        Comm.create("local", config)
        io.kotest.assertions.throwables.shouldThrow<IllegalArgumentException> { Comm.create("local", config) }
        io.kotest.assertions.throwables.shouldThrow<IllegalArgumentException> { Comm.create("local", CommConfig(worldSize = 3, rank = 1, options = config.options)) }
        Comm.create("local", config.copy(rank = 1)).close()
    }

    test("Comm.create joins threads into one world") {
        val config = CommConfig(worldSize = 3, options = mapOf("local.world" to "spec-threads"))
        val sums = withContext(Dispatchers.Default) {
            (0 until 3).map { r ->
                async {
                    Comm.create("local", config.copy(rank = r)).use { comm ->
                        comm.allReduce(Tensor.of(intArrayOf(r + 1))).getLong(0)
                    }
                }
            }.awaitAll()
        }
        sums shouldBe listOf(6L, 6L, 6L)
        Comm.create("local", CommConfig()).use { it.worldSize shouldBe 1; it.allReduce(Tensor.of(intArrayOf(5))).getLong(0) shouldBe 5L }
    }
})
