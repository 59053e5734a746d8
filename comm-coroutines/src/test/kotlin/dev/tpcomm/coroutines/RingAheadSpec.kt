package dev.tpcomm.coroutines

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.types.shouldBeInstanceOf
import java.util.concurrent.atomic.AtomicReference
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import kotlin.time.Duration.Companion.minutes
import kotlin.time.TimeSource

/**
 * A rank that runs more than the local backend's ring of operation slots (256) ahead of another, as
 * a user's loop of `allReduceAsync` does: the operations that find their slot still in use wait for
 * it to be recycled, and are woken when it is (they used to poll it every millisecond: `delay(1)`).
 */
class RingAheadSpec : FunSpec({
    test("rank 0 issues 1000 async all-reduces at once, rank 1 one by one: every result is right") {
        val n = 1000
        val mark = TimeSource.Monotonic.markNow()
        runLocalWorld(2) { comm ->
            val tensors = List(n) { Tensor.of(floatArrayOf(it.toFloat() + comm.rank)) }
            if (comm.rank == 0) {
                coroutineScope { tensors.map { allReduceAsync(comm, it) }.awaitAll() }
            } else {
                for (t in tensors) comm.allReduce(t)
            }
            for (i in 0 until n) tensors[i].getFloat(0) shouldBe (2f * i + 1f)
            tensors.forEach { it.close() }
        }
        // Not asserted (no timed tests): printed for the record, before and after the change.
        println("RingAheadSpec: $n all-reduces with rank 0 up to ${n - 1} ahead took ${mark.elapsedNow()}")
    }

    test("a rank waiting for its slot ends with the abort when the world is aborted") {
        val rank0 = AtomicReference<Throwable?>(null)
        val e = shouldThrow<IllegalStateException> {
            runLocalWorld(2, CommConfig(timeout = 1.minutes)) { comm ->
                if (comm.rank == 0) {
                    // 300 operations: the last 44 wait for slots rank 1 never frees.
                    try {
                        coroutineScope { List(300) { allReduceAsync(comm, Tensor.zeros(DType.Float32, 1)) }.awaitAll() }
                    } catch (t: Throwable) {
                        rank0.set(t)
                        throw t
                    }
                } else {
                    delay(200)
                    error("rank 1 fails before its first all-reduce")
                }
            }
        }
        e.message shouldBe "rank 1 fails before its first all-reduce"
        // Rank 0 ended with the abort, not with runLocalWorld's cancellation one second later.
        rank0.get().shouldBeInstanceOf<CommunicatorAbortedException>()
    }
})
