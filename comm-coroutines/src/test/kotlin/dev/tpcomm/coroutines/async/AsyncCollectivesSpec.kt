package dev.tpcomm.coroutines.async

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.allGatherAsync
import dev.tpcomm.coroutines.allReduceAsync
import dev.tpcomm.coroutines.barrierAsync
import dev.tpcomm.coroutines.broadcastAsync
import dev.tpcomm.coroutines.reduceScatterAsync
import dev.tpcomm.coroutines.startCollective
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.types.shouldBeInstanceOf
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.launch
import kotlinx.coroutines.supervisorScope
import kotlinx.coroutines.yield

class AsyncCollectivesSpec : FunSpec({
    test("a started collective is issued before the call returns, and completes only when every rank has joined") {
        val (c0, c1) = FakeWorld(2).communicators()
        coroutineScope {
            val t0 = Tensor.of(floatArrayOf(1f, 2f))
            val h = allReduceAsync(c0, t0)
            c0.log shouldBe listOf("0:allReduce(Float32,2,Sum)")
            h.isCompleted shouldBe false
            yield()
            h.isCompleted shouldBe false
            val t1 = Tensor.of(floatArrayOf(10f, 20f))
            c1.allReduce(t1)
            h.await().toFloatArray().toList() shouldBe listOf(11f, 22f)
            h.isCompleted shouldBe true
        }
    }

    test("handles started back to back keep call order on every rank and give the right results") {
        val results = fakeWorld(3) { c ->
            val a = Tensor.of(floatArrayOf(c.rank.toFloat()))
            val b = Tensor.of(floatArrayOf(if (c.rank == 2) 7f else 0f))
            val g = Tensor.of(floatArrayOf(c.rank * 10f))
            val rs = Tensor.of(floatArrayOf(1f, 2f, 3f))
            val h1 = allReduceAsync(c, a, ReduceOp.Max)
            val h2 = broadcastAsync(c, b, root = 2)
            val h3 = allGatherAsync(c, g)
            val h4 = reduceScatterAsync(c, rs)
            val h5 = barrierAsync(c)
            h5.await()
            listOf(h1.await().toFloatArray().toList(), h2.await().toFloatArray().toList(), h3.await().toFloatArray().toList(), h4.await().toFloatArray().toList())
        }
        for ((rank, r) in results.withIndex()) {
            r[0] shouldBe listOf(2f)
            r[1] shouldBe listOf(7f)
            r[2] shouldBe listOf(0f, 10f, 20f)
            r[3] shouldBe listOf(3f * (rank + 1))
        }
    }

    test("ranks that start collectives in different orders fail with CollectiveMismatchException") {
        val (c0, c1) = FakeWorld(2).communicators()
        supervisorScope {
            val a0 = allReduceAsync(c0, Tensor.of(floatArrayOf(1f)))
            val b0 = barrierAsync(c0)
            val e = shouldThrow<CommunicationException> {
                barrierAsync(c1).await()
            }
            e.shouldBeInstanceOf<CollectiveMismatchException>()
            shouldThrow<CommunicationException> { a0.await() }
            shouldThrow<CommunicationException> { b0.await() }
        }
    }

    test("compute after the start runs while the collective is still in flight") {
        val (c0, c1) = FakeWorld(2).communicators()
        val peerMayJoin = CompletableDeferred<Unit>()
        coroutineScope {
            launch { peerMayJoin.await(); c1.allReduce(Tensor.of(floatArrayOf(5f))) }
            val t = Tensor.of(floatArrayOf(1f))
            val h = allReduceAsync(c0, t)
            var computed = 0.0
            repeat(1000) { computed += it }          // work done while the collective waits for rank 1
            h.isCompleted shouldBe false
            peerMayJoin.complete(Unit)
            h.await().toFloatArray()[0] shouldBe 6f
            computed shouldBe 499500.0
        }
    }

    test("cancelling an in-flight handle aborts the communicator for the other ranks") {
        val (c0, c1) = FakeWorld(2).communicators()
        supervisorScope {
            val h = allReduceAsync(c0, Tensor.of(floatArrayOf(1f)))
            h.cancel()
            h.isCancelled shouldBe true
            shouldThrow<CancellationException> { h.await() }
            val e = shouldThrow<CommunicatorAbortedException> { c1.allReduce(Tensor.of(floatArrayOf(1f))) }
            e.backend shouldBe "fake"
            // later calls on the cancelled rank fail too
            shouldThrow<CommunicatorAbortedException> { c0.barrier() }
        }
    }

    test("bad arguments surface from await as IllegalArgumentException, and the communicator stays usable") {
        val (c0, c1) = FakeWorld(2).communicators()
        supervisorScope {
            val t = Tensor.of(floatArrayOf(1f))
            val h = allReduceAsync(c0, t, ReduceOp.BitwiseXor)
            h.isCompleted shouldBe true
            val e = shouldThrow<IllegalArgumentException> { h.await() }
            e.message shouldContain "integer"
            t.toFloatArray()[0] shouldBe 1f
            val ok = async { c1.allReduce(Tensor.of(floatArrayOf(2f))) }
            allReduceAsync(c0, t).await().toFloatArray()[0] shouldBe 3f
            ok.await()
        }
    }

    test("a failed handle fails its scope (structured concurrency) unless the scope is a supervisor") {
        val (c0, _) = FakeWorld(2).communicators()
        shouldThrow<IllegalArgumentException> {
            coroutineScope {
                allReduceAsync(c0, Tensor.of(floatArrayOf(1f)), ReduceOp.BitwiseAnd)
                CompletableDeferred<Unit>().await()   // would hang forever if the failure did not cancel the scope
            }
        }
    }

    test("startCollective issues a block of several collectives in order") {
        val out = fakeWorld(2) { c ->
            val h = startCollective {
                val x = c.allReduce(Tensor.of(floatArrayOf(1f)))
                c.allReduce(x).toFloatArray()[0]
            }
            h.await()
        }
        out shouldBe listOf(4f, 4f)
    }
})
