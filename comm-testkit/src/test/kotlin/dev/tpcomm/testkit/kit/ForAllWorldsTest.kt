package dev.tpcomm.testkit.kit

import dev.tpcomm.CommunicationException
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.testkit.WorldCheckConfig
import dev.tpcomm.testkit.WorldPropertyException
import dev.tpcomm.testkit.forAllWorlds
import dev.tpcomm.testkit.tensor
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainExactlyInAnyOrder
import io.kotest.matchers.shouldBe
import io.kotest.matchers.shouldNotBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.types.shouldBeInstanceOf
import io.kotest.property.Arb
import io.kotest.property.arbitrary.int
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.awaitCancellation
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicInteger
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

class ForAllWorldsTest : FunSpec({
    test("a passing property runs on every rank of worlds of the configured sizes") {
        val seen = ConcurrentHashMap.newKeySet<Pair<Int, Int>>()
        forAllWorlds(WorldCheckConfig(worldSizes = listOf(1, 2, 3), iterations = 12, seed = 5)) { comm ->
            val sum = comm.allReduce(Tensor.of(floatArrayOf(1f)))
            sum.getFloat(0) shouldBe comm.worldSize.toFloat()
            seen += comm.worldSize to comm.rank
        }
        seen shouldContainExactlyInAnyOrder listOf(1 to 0, 2 to 0, 2 to 1, 3 to 0, 3 to 1, 3 to 2)
    }

    test("a failing property names the rank that failed first, with what, and shrinks to the smallest failing world") {
        val worlds = AtomicInteger()
        val e = shouldThrow<WorldPropertyException> {
            forAllWorlds(WorldCheckConfig(worldSizes = (1..6).toList(), iterations = 5, seed = 42)) { comm ->
                if (comm.rank == 0) worlds.incrementAndGet()
                // A bug only worlds of 3 or more ranks show, on rank 2, before a collective the others wait in.
                if (comm.worldSize >= 3) comm.rank shouldNotBe 2
                comm.allReduce(Tensor.of(floatArrayOf(1f)))
            }
        }
        e.worldSize shouldBe 3
        e.firstFailedWorldSize shouldBe 6
        e.failedRank shouldBe 2
        e.seed shouldBe 42L
        e.cause.shouldBeInstanceOf<AssertionError>()
        e.rankFailures.keys shouldBe setOf(0, 1, 2)
        e.rankFailures[0].shouldBeInstanceOf<CommunicationException>()
        val m = e.message!!
        m shouldContain "forAllWorlds: the property failed in a world of 3 ranks (shrunk from the world of 6 ranks that failed first); rank 2 failed: AssertionFailedError: 2 should not equal 2"
        m shouldContain "  rank 0: Communicator"
        m shouldContain "(ended because rank 2 failed)"
        m shouldContain "world sizes tried: 1 passed, 2 passed, 3 failed, 6 failed (iteration 1 of 5)"
        m shouldContain "reproduce with WorldCheckConfig(seed = 42L)"
        worlds.get() shouldBe 4 // 6, then 1, 2, 3 while shrinking; nothing after the failure
    }

    test("the same seed gives the same report when several ranks fail, whichever fails first in time (issue 20 item 7)") {
        // Ranks 1 and 2 both fail their own check; which of them throws first is up to the
        // scheduler (here: forced both ways). The report must not depend on it.
        fun run(slowRank: Int): WorldPropertyException = shouldThrow<WorldPropertyException> {
            runBlocking {
                forAllWorlds(WorldCheckConfig(worldSizes = listOf(3), iterations = 1, seed = 7)) { comm ->
                    if (comm.rank == slowRank) Thread.sleep(150)
                    if (comm.rank > 0) comm.rank shouldBe 0
                    comm.allReduce(Tensor.of(floatArrayOf(1f)))
                }
            }
        }
        val a = run(slowRank = 1)
        val b = run(slowRank = 2)
        a.failedRank shouldBe 1
        b.failedRank shouldBe 1
        a.message!!.lines().first() shouldBe b.message!!.lines().first()
        a.message!!.lines().first() shouldContain "rank 1 failed: AssertionFailedError"
    }

    test("the input of the smallest failing world is reported, drawn per world size") {
        val e = shouldThrow<WorldPropertyException> {
            forAllWorlds(
                WorldCheckConfig(worldSizes = listOf(1, 2, 4), iterations = 3, seed = 9),
                input = { n -> Arb.tensor(DType.Float32, listOf(n, 2), floats = 1.0..1.0) },
            ) { comm, x ->
                x.shape[0] shouldBe comm.worldSize
                val total = comm.allReduce(x.copy())
                if (comm.worldSize > 1 && comm.rank == 1) total.getFloat(0) shouldBe 1f // wrong on purpose
            }
        }
        e.worldSize shouldBe 2
        e.failedRank shouldBe 1
        e.message shouldContain "input: Float32[2, 2] [1.0, 1.0, 1.0, 1.0]"
        e.message shouldContain "rank 1 failed: AssertionFailedError: expected:<1.0f> but was:<2.0f>"
        e.message shouldContain "  rank 0: passed"
    }

    test("a rank that never returns is reported as hung instead of hanging the test").config(timeout = 60.seconds) {
        val e = shouldThrow<WorldPropertyException> {
            forAllWorlds(Arb.int(0..0), WorldCheckConfig(worldSizes = listOf(2), iterations = 1, seed = 1, timeout = 500.milliseconds)) { comm, _ ->
                if (comm.rank == 0) awaitCancellation()
            }
        }
        e.hungRanks shouldBe listOf(0)
        e.failedRank shouldBe -1
        e.message shouldContain "ranks [0] hung"
        e.message shouldContain "  rank 1: passed"
    }
})
