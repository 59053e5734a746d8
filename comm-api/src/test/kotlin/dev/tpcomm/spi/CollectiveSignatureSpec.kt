package dev.tpcomm.spi

import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe

class CollectiveSignatureSpec : FunSpec({
    fun gathered(vararg sigs: LongArray): LongArray = sigs.reduce { a, b -> a + b }

    test("equal signatures match") {
        val t = Tensor.zeros(DType.Float32, 4, 8)
        val s = CollectiveSignature.of(CollectiveOp.AllReduce, t, ReduceOp.Sum)
        CollectiveSignature.compare(gathered(s, s, s), 3, 7, "a world of 3 ranks") shouldBe null
        CollectiveSignature.describe(s) shouldBe "allReduce(Float32[4, 8], op=Sum)"
    }

    test("PreMulSum: ranks with different factors agree (NCCL's factor is per rank); PreMulSum against Sum differs in op") {
        val t = Tensor.zeros(DType.Float32, 4)
        val half = CollectiveSignature.of(CollectiveOp.AllReduce, t, ReduceOp.PreMulSum(0.5))
        val two = CollectiveSignature.of(CollectiveOp.AllReduce, t, ReduceOp.PreMulSum(2.0))
        CollectiveSignature.compare(gathered(half, two), 2, 1, "a world of 2 ranks") shouldBe null
        CollectiveSignature.describe(half) shouldBe "allReduce(Float32[4], op=PreMulSum)"
        val sum = CollectiveSignature.of(CollectiveOp.AllReduce, t, ReduceOp.Sum)
        CollectiveSignature.compare(gathered(half, sum), 2, 1, "a world of 2 ranks")!!.fields shouldBe listOf("op")
    }

        test("a mismatch names the ranks, what each called and the fields") {
        val a = CollectiveSignature.of(CollectiveOp.AllReduce, Tensor.zeros(DType.Float32, 4), ReduceOp.Sum)
        val b = CollectiveSignature.of(CollectiveOp.AllReduce, Tensor.zeros(DType.Float64, 5), ReduceOp.Max)
        val c = CollectiveSignature.of(CollectiveOp.Broadcast, Tensor.zeros(DType.Float32, 4), root = 0)
        val m = CollectiveSignature.compare(gathered(a, a, b, c), 4, 12, "a world of 4 ranks")!!
        m.ranks shouldBe listOf(2, 3)
        m.fields shouldBe listOf("operation", "dtype", "op", "shape")
        m.message shouldBe "collective #12 of a world of 4 ranks does not match across ranks: rank 0 called " +
            "allReduce(Float32[4], op=Sum); rank 2 called allReduce(Float64[5], op=Max) (differs in dtype, op, shape); " +
            "rank 3 called broadcast(Float32[4], root=0) (differs in operation). Every rank must call the same collectives " +
            "in the same order with the same dtype, shape, op, root and dim"
    }

    test("tensors of more than 8 dimensions still compare every size") {
        val x = CollectiveSignature.of(CollectiveOp.AllGather, Tensor.zeros(DType.Int8, 1, 1, 1, 1, 1, 1, 1, 1, 2, 3), dim = 0)
        val y = CollectiveSignature.of(CollectiveOp.AllGather, Tensor.zeros(DType.Int8, 1, 1, 1, 1, 1, 1, 1, 1, 3, 2), dim = 0)
        CollectiveSignature.compare(gathered(x, y), 2, 1, "w")!!.fields shouldBe listOf("shape")
    }

    test("a rank speaking another layout version is a protocol mismatch") {
        val a = CollectiveSignature.of(CollectiveOp.Barrier, null)
        val b = a.copyOf().also { it[0] = 42 }
        CollectiveSignature.compare(gathered(a, b), 2, 1, "w")!!.fields shouldBe listOf("protocol")
    }

    test("digest: equal signatures agree; a change in any word is seen by every rank through the MAX of [h, ~h]") {
        val base = CollectiveSignature.of(CollectiveOp.AllReduce, Tensor.zeros(DType.Float32, 4, 8), ReduceOp.Sum)
        CollectiveSignature.digest(base) shouldBe CollectiveSignature.digest(base.copyOf())
        val digests = HashSet<Long>()
        for (i in 0 until CollectiveSignature.SIZE) {
            val other = base.copyOf().also { it[i] = it[i] + 1 }
            val ranks = listOf(base, base, other).map { CollectiveSignature.digest(it) }
            digests += ranks[2]
            val maxH = ranks.max()
            val maxNot = ranks.maxOf { it.inv() }
            // Every rank compares the element-wise MAX with its own pair: none sees its own pair back.
            ranks.count { it == maxH && it.inv() == maxNot } shouldBe 0
        }
        digests.size shouldBe CollectiveSignature.SIZE // 16 different one-word changes, 16 different digests
    }

    test("uneven collectives: different sizes are a mismatch in the field sizes; allToAllV's split word names the peer") {
        val t = Tensor.zeros(DType.Float32, 4, 2)
        fun gv(sizes: List<Int>) = LongArray(CollectiveSignature.SIZE).also {
            CollectiveSignature.encodeShape(it, 0, CollectiveOp.AllGatherV, t.dtype, listOf(4, 2), extra = CollectiveSignature.sizesDigest(sizes))
        }
        CollectiveSignature.compare(gathered(gv(listOf(1, 3)), gv(listOf(1, 3))), 2, 1, "w") shouldBe null
        val m = CollectiveSignature.compare(gathered(gv(listOf(1, 3)), gv(listOf(2, 2))), 2, 1, "w")!!
        m.fields shouldBe listOf("sizes")
        m.ranks shouldBe listOf(1)
        CollectiveSignature.splitsWord(intArrayOf(1, 2, 3), listOf(1, 2, 3)) shouldBe 0L
        CollectiveSignature.splitsWord(intArrayOf(1, 2, 3), listOf(1, 5, 3)) shouldBe 2L
        val a2a = LongArray(CollectiveSignature.SIZE).also {
            CollectiveSignature.encodeShape(it, 0, CollectiveOp.AllToAllV, t.dtype, listOf(-1, 2), extra = 2L)
        }
        CollectiveSignature.describe(a2a) shouldBe "allToAllV(Float32[*, 2], outputSplits[1] differs from the rows rank 1 sends it)"
    }
})
