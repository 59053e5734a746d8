package dev.tpcomm.coroutines

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.Tensor
import dev.tpcomm.WarmUp
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldHaveSize
import io.kotest.matchers.ints.shouldBeGreaterThan
import io.kotest.matchers.longs.shouldBeGreaterThanOrEqual
import io.kotest.matchers.longs.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import kotlin.time.Duration
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/**
 * `CommConfig.warmUp` as a user meets it (issue 37): a world made with it hands its ranks
 * communicators that have already run the small-call path for that long, every rank the same number
 * of calls, and what the ranks then call works as without it.
 */
@OptIn(InternalTpcommApi::class)
class WarmUpSpec : FunSpec({
    /** The highest collective number the rank's flight recorder holds: the calls made so far. */
    fun collectives(comm: dev.tpcomm.Communicator): Long =
        (comm as FlightRecorded).flightRecorder.snapshot().maxOfOrNull { it.collectiveSequence ?: 0L } ?: 0L

    test("runLocalWorld with warmUp: each rank's block starts after about that long, every rank having made the same calls; its own calls are right") {
        val start = System.nanoTime()
        val seen = runLocalWorld(4, CommConfig(worldSize = 4, warmUp = 300.milliseconds)) { comm ->
            val startedAfter = System.nanoTime() - start
            val warmed = collectives(comm)
            val t = Tensor.of(floatArrayOf(comm.rank + 1f, -1f))
            comm.allReduce(t)
            val sums = t.getFloat(0) to t.getFloat(1)
            t.close()
            Triple(startedAfter, warmed, sums)
        }
        for ((startedAfter, warmed, sums) in seen) {
            startedAfter shouldBeGreaterThanOrEqual 300.milliseconds.inWholeNanoseconds
            warmed.toInt() shouldBeGreaterThan 100
            sums shouldBe (10f to -4f)
        }
        seen.map { it.second }.toSet() shouldHaveSize 1
    }

    test("without warmUp (the default) no call is made before the block") {
        runLocalWorld(2, CommConfig(worldSize = 2)) { comm -> collectives(comm) } shouldBe listOf(0L, 0L)
    }

    test("Comm.create with warmUp returns a communicator that warmed for about that long") {
        val start = System.nanoTime()
        Comm.create("local", CommConfig(warmUp = 200.milliseconds)).use { comm ->
            System.nanoTime() - start shouldBeGreaterThanOrEqual 200.milliseconds.inWholeNanoseconds
            collectives(comm).toInt() shouldBeGreaterThan 100
        }
    }

    test("ranks whose durations differ stop together, after the same call, when the shortest ends") {
        val start = System.nanoTime()
        val calls = runLocalWorld(3, CommConfig(worldSize = 3)) { comm ->
            val n = WarmUp.run(comm, if (comm.rank == 1) 150.milliseconds else 30.seconds)
            n to System.nanoTime() - start
        }
        calls.map { it.first }.toSet() shouldHaveSize 1
        calls.first().first shouldBeGreaterThan 0
        for ((_, ended) in calls) ended shouldBeLessThan 10.seconds.inWholeNanoseconds
    }

    test("a zero or negative duration makes no call") {
        runLocalWorld(2, CommConfig(worldSize = 2)) { comm -> WarmUp.run(comm, Duration.ZERO) + WarmUp.run(comm, (-1).seconds) } shouldBe listOf(0, 0)
    }

    test("TPCOMM_WARM_UP_SECONDS sets it; a negative or non-numeric value, or a negative warmUp, is refused saying what it takes") {
        CommConfig.fromEnvironment(mapOf("TPCOMM_WARM_UP_SECONDS" to "1.5")).warmUp shouldBe 1.5.seconds
        CommConfig.fromEnvironment(mapOf("TPCOMM_WARM_UP_SECONDS" to "0")).warmUp shouldBe Duration.ZERO
        CommConfig.fromEnvironment(emptyMap()).warmUp shouldBe Duration.ZERO
        for (bad in listOf("-1", "two", "")) {
            shouldThrow<IllegalArgumentException> { CommConfig.fromEnvironment(mapOf("TPCOMM_WARM_UP_SECONDS" to bad)) }.message shouldContain "TPCOMM_WARM_UP_SECONDS"
        }
        shouldThrow<IllegalArgumentException> { CommConfig(warmUp = (-1).milliseconds) }.message shouldContain "warmUp"
        CommConfig.builder().warmUp(java.time.Duration.ofMillis(250)).build().warmUp shouldBe 250.milliseconds
    }

    test("a communicator that takes no host tensor fails the warm-up on its first call, saying to leave warmUp at zero") {
        val e = runLocalWorld(1, CommConfig()) { comm ->
            shouldThrow<IllegalArgumentException> { WarmUp.run(HostRefusing(comm), 1.seconds) }
        }.single()
        e.message shouldContain "leave warmUp at zero"
    }
})

/** A communicator whose collectives refuse host tensors as a GPU communicator's do (`CollectiveChecks.device`). */
private class HostRefusing(private val inner: dev.tpcomm.Communicator) : dev.tpcomm.Communicator by inner {
    override suspend fun allReduce(tensor: Tensor, op: dev.tpcomm.ReduceOp): Tensor {
        require(tensor.dtype != DType.Float32) { "allReduce: this communicator moves tensors on cuda:0 but got a host tensor; copy it to cuda:0 first (no hidden copies are made)" }
        return inner.allReduce(tensor, op)
    }
}
