package dev.tpcomm.coroutines.async

import dev.tpcomm.CommunicationException
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.FusionPlan
import dev.tpcomm.coroutines.allReduceCoalesced
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.property.Arb
import io.kotest.property.arbitrary.element
import io.kotest.property.arbitrary.int
import io.kotest.property.arbitrary.list
import io.kotest.property.arbitrary.long
import io.kotest.property.checkAll
import kotlinx.coroutines.async
import kotlinx.coroutines.supervisorScope

class TensorFusionSpec : FunSpec({
    fun f32(n: Int) = Tensor.zeros(DType.Float32, n)

    test("the plan groups by dtype, packs in order up to the threshold, and sends big tensors alone") {
        val a = f32(4); val b = f32(4); val c = Tensor.zeros(DType.Int64, 2); val d = f32(100); val e = f32(2); val empty = f32(0)
        // threshold 32 bytes: a (16) + b (16) fit; d (400) is alone; e starts a new bucket; c is Int64 (16) in its own group;
        // buckets are issued in the order of their first tensor
        val plan = FusionPlan.of(listOf(a, b, c, d, empty, e), thresholdBytes = 32)
        plan.buckets.map { bucket -> bucket.members.map { listOf(a, b, c, d, e).indexOf(it) } } shouldBe
            listOf(listOf(0, 1), listOf(2), listOf(3), listOf(4))
        plan.buckets.map { it.isFused } shouldBe listOf(true, false, false, false)
        plan.buckets.map { it.dtype } shouldBe listOf(DType.Float32, DType.Int64, DType.Float32, DType.Float32)
    }

    test("coalesced all-reduce gives the same values as one all-reduce per tensor, with fewer collectives") {
        val logs = fakeWorld(3) { comm ->
            val ts = listOf(
                Tensor.of(floatArrayOf(1f, 2f, 3f)),
                Tensor.of(intArrayOf(comm.rank, 1)),
                Tensor.of(floatArrayOf(comm.rank.toFloat())),
                Tensor.of(doubleArrayOf(0.5, 1.5)),
                Tensor.of(floatArrayOf(10f, 20f, 30f, 40f, 50f, 60f, 70f, 80f)),   // 32 bytes: alone, in place
            )
            val same = comm.allReduceCoalesced(ts, ReduceOp.Sum, thresholdBytes = 32)
            same shouldBe ts
            ts[0].toFloatArray().toList() shouldBe listOf(3f, 6f, 9f)
            ts[1].toIntArray().toList() shouldBe listOf(3, 3)
            ts[2].toFloatArray().toList() shouldBe listOf(3f)
            ts[3].toDoubleArray().toList() shouldBe listOf(1.5, 4.5)
            ts[4].toFloatArray().toList() shouldBe listOf(30f, 60f, 90f, 120f, 150f, 180f, 210f, 240f)
            comm.log
        }
        // Float32 [0, 2] fused, Float32 [4] alone, Int32 [1] alone, Float64 [3] alone: 4 collectives instead of 5
        logs[0].count { it.startsWith("0:") } shouldBe 4
    }

    test("property: for random tensor lists and thresholds, fusion equals per-tensor reduction") {
        checkAll(25, Arb.list(Arb.int(0..40), 1..12), Arb.list(Arb.element(DType.Float32, DType.Float64, DType.Int32), 12..12), Arb.long(1L..256L)) { sizes, dtypes, threshold ->
            fakeWorld(2) { comm ->
                val ts = sizes.mapIndexed { i, n -> Tensor.fromDoubles(dtypes[i], DoubleArray(n) { j -> (comm.rank + 1) * (i + j).toDouble() }) }
                comm.allReduceCoalesced(ts, ReduceOp.Max, threshold)
                ts.forEachIndexed { i, t ->
                    t.toDoubleArray().toList() shouldBe List(sizes[i]) { j -> 2.0 * (i + j) }
                }
            }
        }
    }

    test("bad arguments fail before any data moves, saying what to change") {
        val (c0, _) = FakeWorld(2).communicators()
        val t = Tensor.of(floatArrayOf(1f, 2f))
        shouldThrow<IllegalArgumentException> { c0.allReduceCoalesced(listOf(t, t)) }.message shouldContain "overlap in memory"
        val whole = Tensor.of(floatArrayOf(1f, 2f, 3f, 4f))
        val (left, right) = whole.chunk(2)
        shouldThrow<IllegalArgumentException> { c0.allReduceCoalesced(listOf(whole, right)) }.message shouldContain "tensors 0 and 1 overlap"
        c0.allReduceCoalesced(emptyList()) shouldBe emptyList()
        shouldThrow<IllegalArgumentException> { c0.allReduceCoalesced(listOf(t), ReduceOp.BitwiseOr) }.message shouldContain "integer dtypes and Bool only"
        shouldThrow<IllegalArgumentException> { c0.allReduceCoalesced(listOf(t), thresholdBytes = 0) }.message shouldContain "thresholdBytes"
        val closed = Tensor.of(floatArrayOf(1f)).also { it.close() }
        shouldThrow<IllegalArgumentException> { c0.allReduceCoalesced(listOf(t, closed)) }.message shouldContain "closed"
        t.toFloatArray().toList() shouldBe listOf(1f, 2f)
        left.toFloatArray().toList() shouldBe listOf(1f, 2f)
        c0.log shouldBe emptyList()
    }

    test("ranks passing different tensor lists fail as mismatched collectives instead of corrupting data") {
        val (c0, c1) = FakeWorld(2).communicators()
        supervisorScope {
            val a = async { c0.allReduceCoalesced(listOf(Tensor.of(floatArrayOf(1f)), Tensor.of(floatArrayOf(2f)))) }
            val b = async { c1.allReduceCoalesced(listOf(Tensor.of(floatArrayOf(1f, 2f, 3f)))) }
            shouldThrow<CommunicationException> { a.await() }
            shouldThrow<CommunicationException> { b.await() }
        }
    }
})
