package dev.tpcomm.coroutines.async

import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.allReducePipelined
import dev.tpcomm.coroutines.overlap
import dev.tpcomm.coroutines.pipeline
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.awaitCancellation
import kotlinx.coroutines.delay
import java.util.concurrent.atomic.AtomicInteger

class OverlapSpec : FunSpec({
    test("overlap issues the communication first and runs the compute while it is in flight") {
        val events = mutableListOf<String>()
        val gate = CompletableDeferred<Unit>()
        val (c, r) = overlap(
            communication = { events += "comm issued"; gate.await(); events += "comm done"; 1 },
            compute = { events += "compute"; gate.complete(Unit); "r" },
        )
        (c to r) shouldBe (1 to "r")
        events shouldBe listOf("comm issued", "compute", "comm done")
    }

    test("overlap with real collectives on two ranks") {
        val out = fakeWorld(2) { comm ->
            val t = Tensor.of(floatArrayOf(comm.rank + 1f))
            val (reduced, local) = overlap({ comm.allReduce(t) }, { (1..100).sum() })
            reduced.toFloatArray()[0] to local
        }
        out shouldBe listOf(3f to 5050, 3f to 5050)
    }

    test("a failing compute cancels the communication and is thrown") {
        var cancelled = false
        shouldThrow<IllegalStateException> {
            overlap(
                communication = { try { awaitCancellation() } finally { cancelled = true } },
                compute = { error("compute failed") },
            )
        }
        cancelled shouldBe true
    }

    test("pipeline computes in order, issues each item's communication before the next compute, and returns results in order") {
        val events = mutableListOf<String>()
        val gates = List(3) { CompletableDeferred<Unit>() }
        val results = pipeline(
            count = 3,
            compute = { i -> events += "compute $i"; if (i > 0) gates[i - 1].complete(Unit); i * 10 },
            communicate = { i, v -> events += "issue $i"; if (i < 2) gates[i].await() else gates[i].complete(Unit); events += "done $i"; v + 1 },
        )
        results shouldBe listOf(1, 11, 21)
        events.take(4) shouldBe listOf("compute 0", "issue 0", "compute 1", "issue 1")
        (events.indexOf("done 0") > events.indexOf("compute 1")) shouldBe true
        events.indexOf("issue 2") shouldBe events.indexOf("compute 2") + 1
    }

    test("pipeline keeps at most maxInFlight communications outstanding") {
        val inFlight = AtomicInteger()
        var peak = 0
        val r = pipeline(
            count = 8,
            maxInFlight = 2,
            compute = { it },
            communicate = { _, v ->
                val now = inFlight.incrementAndGet()
                peak = maxOf(peak, now)
                delay(5)
                inFlight.decrementAndGet()
                v
            },
        )
        r shouldBe (0 until 8).toList()
        peak shouldBe 2
    }

    test("pipeline propagates a communication failure and cancels the rest") {
        var laterCancelled = false
        shouldThrow<IllegalArgumentException> {
            pipeline(
                count = 3,
                compute = { it },
                communicate = { i, _ ->
                    when (i) {
                        0 -> try { awaitCancellation() } finally { laterCancelled = true }
                        1 -> { delay(1); throw IllegalArgumentException("bad item") }
                        else -> Unit
                    }
                },
            )
        }
        laterCancelled shouldBe true
    }

    test("pipeline rejects bad arguments") {
        shouldThrow<IllegalArgumentException> { pipeline(-1, compute = { it }, communicate = { _, v -> v }) }
        shouldThrow<IllegalArgumentException> { pipeline(1, maxInFlight = 0, compute = { it }, communicate = { _, v -> v }) }
        pipeline(0, compute = { it }, communicate = { _, v -> v }) shouldBe emptyList()
    }

    test("allReducePipelined fills each chunk then all-reduces it, overlapping the next chunk's compute") {
        val out = fakeWorld(3) { comm ->
            val grads = List(4) { Tensor.zeros(DType.Float64, 2) }
            comm.allReducePipelined(grads) { i, chunk -> chunk.fill((comm.rank + 1.0) * (i + 1)) }
            grads.map { it.toDoubleArray().toList() }
        }
        for (r in out) r shouldBe List(4) { i -> listOf(6.0 * (i + 1), 6.0 * (i + 1)) }
    }
})
