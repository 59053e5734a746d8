package dev.tpcomm.coroutines.local

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainExactly
import io.kotest.matchers.longs.shouldBeGreaterThanOrEqual
import io.kotest.matchers.longs.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.types.shouldBeInstanceOf
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.delay
import kotlinx.coroutines.withContext
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/**
 * `split` (the in-process backend's only creation that waits for peers) is bounded by
 * `CommConfig.creationTimeout`, not by the operation timeout.
 */
class CreationTimeoutSpec : FunSpec({
    test("a split whose peer arrives after the operation timeout but within the creation timeout succeeds on every rank") {
        val config = CommConfig(worldSize = 2, timeout = 300.milliseconds, creationTimeout = 10.seconds)
        val sums = withContext(Dispatchers.Default) {
            runLocalWorld(2, config) { comm ->
                if (comm.rank == 1) delay(1_500) // five operation timeouts late
                val child = comm.split(color = 0, key = comm.rank)!!
                child.allReduce(Tensor.of(intArrayOf(comm.rank + 1))).toIntArray().single()
            }
        }
        sums shouldContainExactly listOf(3, 3)
    }

    test("a split that a rank never joins fails past the creation timeout with CommunicationTimeoutException on every waiting rank") {
        val config = CommConfig(worldSize = 3, timeout = 30.seconds, creationTimeout = 1.seconds)
        val outcomes = withContext(Dispatchers.Default) {
            runLocalWorld(3, config) { comm ->
                if (comm.rank == 2) {
                    delay(3_000) // never splits, and stays in the world past the others' deadline
                    null
                } else {
                    val start = System.nanoTime()
                    val r = runCatching { comm.split(color = 0, key = comm.rank) }
                    r.exceptionOrNull() to (System.nanoTime() - start) / 1_000_000
                }
            }
        }
        for (rank in 0..1) {
            val (e, ms) = outcomes[rank]!!
            e.shouldBeInstanceOf<CommunicationTimeoutException>()
            e.operation shouldBe "split"
            e.message!! shouldContain "creationTimeout"
            ms shouldBeGreaterThanOrEqual 1_000
            ms shouldBeLessThan 2_500 // the deadline plus two watchdog periods and scheduling, far from the 30 s operation timeout
        }
    }
})
