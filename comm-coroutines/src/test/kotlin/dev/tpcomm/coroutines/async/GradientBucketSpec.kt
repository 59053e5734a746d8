package dev.tpcomm.coroutines.async

import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.coroutines.GradientBucket
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain

class GradientBucketSpec : FunSpec({
    test("the bucket's tensors are views of one buffer, reduced by one all-reduce, kept between steps") {
        val results = runLocalWorld(3) { comm ->
            GradientBucket(DType.Float32, listOf(listOf(2, 3), listOf(4), listOf(1, 1))).use { bucket ->
                val (w, b, s) = bucket.tensors
                w.shape shouldBe listOf(2, 3)
                b.address shouldBe bucket.buffer.address + 6 * 4
                s.address shouldBe bucket.buffer.address + 10 * 4
                val address = bucket.buffer.address
                val steps = ArrayList<List<Float>>()
                for (step in 1..2) {
                    bucket.zero()
                    w.fill((comm.rank + step).toDouble())
                    b.fill(1.0)
                    s.fill(comm.rank.toDouble())
                    bucket.allReduce(comm, ReduceOp.Avg)
                    bucket.buffer.address shouldBe address // the same buffer every step
                    steps += listOf(w.getFloat(5), b.getFloat(0), s.getFloat(0))
                }
                steps
            }
        }
        results.forEach { it shouldBe listOf(listOf(2f, 1f, 1f), listOf(3f, 1f, 1f)) }
    }

    test("closing the bucket closes its views; bad shapes are refused") {
        val bucket = GradientBucket(DType.Int64, listOf(listOf(2), listOf(3)))
        bucket.close()
        bucket.tensors.all { it.isClosed } shouldBe true
        shouldThrow<IllegalArgumentException> { GradientBucket(DType.Int64, emptyList()) }
        shouldThrow<IllegalArgumentException> { GradientBucket(DType.Int8, listOf(listOf(65536, 65536))) }.message shouldContain
            "split them into several buckets"
    }
})
