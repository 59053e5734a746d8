package dev.tpcomm.examples

import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.withContext
import kotlin.random.Random

class MoeRoutingTest : FunSpec({
    test("tokens routed to skewed experts come back in order, each scaled by its expert") {
        val world = 4
        val perRank = 2
        val tokens = 24
        val hidden = 8
        val results = withContext(Dispatchers.Default) {
            runLocalWorld(world, CommConfig(worldSize = world)) { comm ->
                val random = Random(comm.rank)
                // Skewed routing: most tokens go to expert 0 (rank 0); rank 3's experts get none.
                val expertOf = IntArray(tokens) { if (random.nextInt(3) == 0) random.nextInt(world * perRank - 2) else 0 }
                val x = Tensor.zeros(DType.Float32, tokens, hidden)
                for (i in 0 until tokens * hidden) x.setFloat(i.toLong(), comm.rank * 1000f + i)
                val moe = MoeRouting(comm, perRank)
                val y = moe.forward(x, expertOf)
                val wrong = (0 until tokens * hidden).count { i ->
                    y.getFloat(i.toLong()) != x.getFloat(i.toLong()) * (expertOf[i / hidden] + 1)
                }
                Triple(wrong, moe.lastInputSplits, moe.lastOutputSplits)
            }
        }
        results.forEach { it.first shouldBe 0 }
        // The counts agree pairwise: what rank i sends to j is what j receives from i.
        for (i in 0 until world) for (j in 0 until world) results[i].second[j] shouldBe results[j].third[i]
        results[3].third.sum() shouldBe 0
    }
})
