package dev.tpcomm.bench

import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.doubles.plusOrMinus
import io.kotest.matchers.shouldBe

class BenchOpTest : FunSpec({
    test("nccl-tests bus bandwidth factors") {
        BenchOp.AllReduce.busFactor(4) shouldBe (1.5 plusOrMinus 1e-12)
        BenchOp.AllReduce.busFactor(2) shouldBe (1.0 plusOrMinus 1e-12)
        BenchOp.AllGather.busFactor(4) shouldBe (0.75 plusOrMinus 1e-12)
        BenchOp.ReduceScatter.busFactor(4) shouldBe (0.75 plusOrMinus 1e-12)
        BenchOp.AllToAll.busFactor(2) shouldBe (0.5 plusOrMinus 1e-12)
        BenchOp.Broadcast.busFactor(4) shouldBe 1.0
        BenchOp.Reduce.busFactor(8) shouldBe 1.0
        BenchOp.AllReduce.busFactor(1) shouldBe 0.0
    }

    test("algbw counts world x bytes for all-gather, reduce-scatter and all-to-all") {
        // 1 GB per rank in 1 s.
        BenchOp.AllReduce.algbw(1_000_000_000, 4, 1.0) shouldBe (1.0 plusOrMinus 1e-12)
        BenchOp.AllGather.algbw(1_000_000_000, 4, 1.0) shouldBe (4.0 plusOrMinus 1e-12)
        BenchOp.ReduceScatter.algbw(1_000_000_000, 4, 2.0) shouldBe (2.0 plusOrMinus 1e-12)
        BenchOp.AllToAll.busbw(1_000_000_000, 4, 1.0) shouldBe (3.0 plusOrMinus 1e-12)
        BenchOp.AllReduce.busbw(1_000_000_000, 4, 1.0) shouldBe (1.5 plusOrMinus 1e-12)
        BenchOp.Broadcast.busbw(500_000_000, 4, 1.0) shouldBe (0.5 plusOrMinus 1e-12)
    }

    test("check pattern: exact expected reductions") {
        // ranks 0..3, element 0: inputs 1,2,3,4
        CheckPattern.reduceExpected(ReduceOp.Sum, DType.Float32, 4, 0) shouldBe 10.0
        CheckPattern.reduceExpected(ReduceOp.Avg, DType.Float32, 4, 0) shouldBe 2.5
        CheckPattern.reduceExpected(ReduceOp.Avg, DType.Int32, 4, 0) shouldBe 2.0
        CheckPattern.reduceExpected(ReduceOp.Min, DType.Int8, 4, 1) shouldBe 1.0
        CheckPattern.reduceExpected(ReduceOp.Max, DType.BFloat16, 4, 1) shouldBe 4.0
        CheckPattern.reduceExpected(ReduceOp.BitwiseOr, DType.Int64, 4, 0) shouldBe 7.0
        for (w in 1..9) for (i in 0L..20L) CheckPattern.reduceExpected(ReduceOp.Product, DType.Float32, w, i) shouldBe 2.0
    }

    test("CSV and repeats lines") {
        val r = BenchResult("tpcomm_local", BenchOp.AllGather, 4, 1024, 256, 12.5, 0.3277, 0.2458, 0, 100, listOf(12.0, 12.5, 13.0))
        r.csvLine() shouldBe "tpcomm_local,allgather,4,1024,12.500,0.3277,0.2458"
        r.repeatsLine() shouldBe "tpcomm_local,allgather,4,1024,100,12.000,12.500,13.000"
        BenchResult.repeatsHeader(3) shouldBe "impl,collective,world,bytes,K,t1_us,t2_us,t3_us"
    }
})
