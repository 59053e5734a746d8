package dev.tpcomm.examples

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.doubles.shouldBeGreaterThan
import io.kotest.matchers.doubles.shouldBeLessThan
import io.kotest.matchers.floats.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.shouldNotBe
import io.kotest.matchers.string.shouldContain
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.withContext
import java.io.ByteArrayOutputStream
import java.io.PrintStream

class TensorParallelMlpTest : FunSpec({
    val tiny = MlpConfig(hidden = 16, ffn = 32, seq = 8, batch = 2, steps = 6, lr = 0.1f)

    suspend fun demo(world: Int, sp: Boolean, config: MlpConfig = tiny, wrap: (Communicator) -> Communicator = { it }): Pair<DemoOutcome, String> {
        val opts = DemoOptions(world = world, sequenceParallel = sp, model = config, timingSteps = 1, progress = false)
        val outs = withContext(Dispatchers.Default) {
            runLocalWorld(world, CommConfig(worldSize = world)) { comm ->
                val out = ByteArrayOutputStream()
                TpDemo(wrap(comm), opts, PrintStream(out), null).run() to out.toString()
            }
        }
        outs.forEach { it.first.maxRelativeError shouldBe outs[0].first.maxRelativeError }
        return outs[0]
    }

    test("the dense model learns: its loss falls") {
        val data = SyntheticData(tiny.copy(steps = 40))
        val dense = DenseMlp(tiny, SyntheticData.initialWeights(tiny))
        val losses = (0 until 40).map { val (x, t) = data.batch(it % 2); dense.step(x, t) }
        losses.last() shouldBeLessThan losses.first() * 0.8f
    }

    test("dense gradients match finite differences of the loss") {
        val c = MlpConfig(hidden = 4, ffn = 8, seq = 2, batch = 1, steps = 1, lr = 1f)
        val (x, t) = SyntheticData(c).batch(0)
        val w = SyntheticData.initialWeights(c)
        // With lr = 1 one SGD step subtracts the gradient: recover it from the weights' change.
        val stepped = DenseMlp(c, w).also { it.step(x, t) }.weights
        for ((name, p) in w.named()) {
            val after = stepped.named().first { it.first == name }.second
            for (i in p.indices step 3) {
                val grad = (p[i] - after[i]).toDouble()
                val eps = 1e-2f
                val plus = DenseMlp(c, w.withChanged(name, i, eps)).forward(x, t).toDouble()
                val minus = DenseMlp(c, w.withChanged(name, i, -eps)).forward(x, t).toDouble()
                val fd = (plus - minus) / (2 * eps)
                kotlin.math.abs(fd - grad) shouldBeLessThan 2e-3 + 2e-2 * kotlin.math.abs(grad)
            }
        }
    }

    test("tensor-parallel training matches the dense model on 1, 2 and 4 ranks, plain and sequence-parallel") {
        for (world in listOf(1, 2, 4)) for (sp in listOf(false, true)) {
            val (outcome, text) = demo(world, sp)
            outcome.maxRelativeError shouldBeLessThan 1e-5
            text shouldContain "matches dense: max relative error"
            text shouldContain "time per step"
            outcome.losses.size shouldBe tiny.steps
            outcome.msPerStepOverlap!! shouldBeGreaterThan 0.0
        }
    }

    test("without overlap the result is the same") {
        val data = SyntheticData(tiny)
        val init = SyntheticData.initialWeights(tiny)
        val results = withContext(Dispatchers.Default) {
            runLocalWorld(2) { comm ->
                listOf(false, true).map { overlap ->
                    TensorParallelMlp(comm, tiny, init, sequenceParallel = false, overlap = overlap).use { m ->
                        repeat(3) { val (x, t) = data.batch(it); m.step(x, t) }
                        m.gatherWeights().w2.toList()
                    }
                }
            }
        }
        results[0][0] shouldBe results[0][1]
    }

    test("a communicator that corrupts the all-reduce is caught by the dense check") {
        val corrupt: (Communicator) -> Communicator = { real ->
            object : Communicator by real {
                override suspend fun allReduce(tensor: Tensor, op: ReduceOp): Tensor {
                    real.allReduce(tensor, op)
                    if (tensor.dtype == dev.tpcomm.DType.Float32 && tensor.numel > 4) tensor.setDouble(3, tensor.getDouble(3) + 0.5)
                    return tensor
                }
            }
        }
        val (outcome, text) = demo(2, sp = false, wrap = corrupt)
        outcome.maxRelativeError shouldBeGreaterThan 1e-5
        text shouldContain "FAILED"
    }

    test("sizes that do not shard are refused with what to change") {
        shouldThrow<IllegalArgumentException> { DemoOptions(world = 3, model = tiny) }.message!! shouldContain "ffn 32 is not divisible by the world size 3"
        shouldThrow<IllegalArgumentException> { DemoOptions(world = 16, sequenceParallel = true, model = tiny.copy(ffn = 64)) }.message!! shouldContain "seq 8"
        shouldThrow<IllegalArgumentException> { MlpConfig(steps = 0) }
    }

    test("options parse; bad ones are refused") {
        val o = DemoOptions.parse(listOf("--backend", "mpi", "--world", "2", "--sequence-parallel", "--steps=7", "--hidden", "32", "--ffn", "64", "--lr", "0.2", "--no-progress"))!!
        o.backend shouldBe "mpi"
        o.world shouldBe 2
        o.sequenceParallel shouldBe true
        o.model.steps shouldBe 7
        o.model.hidden shouldBe 32
        o.model.lr shouldBe 0.2f
        o.progress shouldBe false
        DemoOptions.parse(listOf("-h")) shouldBe null
        shouldThrow<IllegalArgumentException> { DemoOptions.parse(listOf("--steps", "x")) }.message!! shouldContain "whole number"
        shouldThrow<IllegalArgumentException> { DemoOptions.parse(listOf("--what")) }.message!! shouldContain "unknown argument"
        shouldThrow<IllegalArgumentException> { DemoOptions.parse(listOf("--backend", "gloo")) }.message!! shouldContain "local or mpi"
    }

    test("relative error: zero for equal arrays, NaN is reported") {
        TpDemo.relativeError(floatArrayOf(1f, 2f), floatArrayOf(1f, 2f)) shouldBe 0.0
        TpDemo.relativeError(floatArrayOf(1f, 2.5f), floatArrayOf(1f, 2f)) shouldBe 0.25
        TpDemo.relativeError(floatArrayOf(Float.NaN), floatArrayOf(1f)).isNaN() shouldBe true
        TpDemo.relativeError(floatArrayOf(0f), floatArrayOf(0f)) shouldNotBe Double.NaN
    }
})

private fun MlpWeights.withChanged(name: String, i: Int, delta: Float): MlpWeights {
    val copy = MlpWeights(w1.copyOf(), b1.copyOf(), w2.copyOf(), b2.copyOf())
    copy.named().first { it.first == name }.second[i] += delta
    return copy
}
