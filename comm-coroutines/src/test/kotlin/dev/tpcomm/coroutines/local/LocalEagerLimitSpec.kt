package dev.tpcomm.coroutines.local

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainExactly
import io.kotest.matchers.longs.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.withTimeout
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/**
 * Issue 20, item 1: point-to-point on the in-process backend behaves like MPI's rendezvous above
 * the eager limit, so a program whose correctness depends on sends being buffered fails in its test,
 * not under `mpirun`.
 */
class LocalEagerLimitSpec : FunSpec({
    val short = CommConfig(timeout = 2.seconds)

    test("the naive 16 MiB ring (send to the next rank, then receive from the previous) deadlocks in-process as under MPI, and the timeout names the eager limit") {
        val started = System.nanoTime()
        val e = shouldThrow<CommunicationTimeoutException> {
            runLocalWorld(3, short) { comm ->
                val n = comm.worldSize
                val out = filled(DType.Float32, comm.rank.toFloat(), 4 shl 20)
                val inp = Tensor.zeros(DType.Float32, 4 shl 20)
                comm.send(out, (comm.rank + 1) % n)
                comm.recv(inp, (comm.rank + n - 1) % n)
            }
        }
        e.message!! shouldContain "eager limit"
        e.message!! shouldContain LocalBackendFactory.EAGER_LIMIT_OPTION
        (System.nanoTime() - started) shouldBeLessThan 30_000_000_000L
    }

    test("the same ring with the sends launched beside the receives completes") {
        val got = runLocalWorld(3) { comm ->
            val n = comm.worldSize
            val out = filled(DType.Float32, comm.rank.toFloat(), 4 shl 20)
            val inp = Tensor.zeros(DType.Float32, 4 shl 20)
            coroutineScope {
                launch { comm.send(out, (comm.rank + 1) % n) }
                comm.recv(inp, (comm.rank + n - 1) % n)
            }
            inp.toFloatArray().let { it.first() to it.last() }
        }
        got shouldContainExactly listOf(2f to 2f, 0f to 0f, 1f to 1f)
    }

    test("a send at or below the eager limit returns before any receive is posted; one above it waits for the receive") {
        val limit = LocalBackendFactory.DEFAULT_EAGER_LIMIT
        runLocalWorld(2) { comm ->
            if (comm.rank == 0) {
                val small = Tensor.zeros(DType.Int8, limit.toInt())
                withTimeout(1.seconds) { comm.send(small, 1, tag = 1) } // buffered: rank 1 receives only later
                val large = filled(DType.Int8, 7f, limit.toInt() + 1)
                val t0 = System.nanoTime()
                comm.send(large, 1, tag = 2)
                (System.nanoTime() - t0) shouldBeLessThan Long.MAX_VALUE
                // The receiver waited 300 ms before posting: the send could not have returned earlier.
                ((System.nanoTime() - t0) >= 250_000_000L) shouldBe true
            } else {
                delay(300.milliseconds)
                comm.recv(Tensor.zeros(DType.Int8, limit.toInt()), 0, tag = 1)
                val big = Tensor.zeros(DType.Int8, limit.toInt() + 1)
                comm.recv(big, 0, tag = 2)
                big.toFloatArray().all { it == 7f } shouldBe true
            }
        }
    }

    test("a send to this rank is buffered at any size, as on MPI (send-then-receive to self works)") {
        runLocalWorld(2) { comm ->
            val big = filled(DType.Float32, comm.rank + 1f, 1 shl 20)
            comm.send(big, comm.rank, tag = 3)
            val back = Tensor.zeros(DType.Float32, 1 shl 20)
            comm.recv(back, comm.rank, tag = 3)
            back.getFloat(0) shouldBe comm.rank + 1f
        }
    }

    test("messages of one source and tag arrive in the order sent, across the limit; probe sees a waiting send") {
        val limit = LocalBackendFactory.DEFAULT_EAGER_LIMIT.toInt()
        runLocalWorld(2) { comm ->
            if (comm.rank == 0) {
                coroutineScope {
                    comm.send(filled(DType.Int8, 1f, 8), 1, tag = 5)
                    launch { comm.send(filled(DType.Int8, 2f, limit * 4), 1, tag = 5) }
                }
            } else {
                delay(100.milliseconds)
                comm.probe(0, 5).byteSize shouldBe 8L
                comm.recv(Tensor.zeros(DType.Int8, 8), 0, tag = 5)
                comm.probe(0, 5).byteSize shouldBe limit * 4L
                val big = Tensor.zeros(DType.Int8, limit * 4)
                comm.recv(big, 0, tag = 5)
                big.toFloatArray().all { it == 2f } shouldBe true
            }
        }
    }

    test("a send above the limit cut by the caller's deadline is withdrawn: the receiver never sees it, and the communicator stays usable") {
        runLocalWorld(2) { comm ->
            val limit = LocalBackendFactory.DEFAULT_EAGER_LIMIT.toInt()
            if (comm.rank == 0) {
                shouldThrow<CommunicationTimeoutException> {
                    withTimeout(200.milliseconds) { comm.send(filled(DType.Int8, 3f, limit * 2), 1, tag = 9) }
                }.message!! shouldContain "eager limit"
                comm.send(filled(DType.Int8, 4f, 16), 1, tag = 9)
            } else {
                delay(500.milliseconds)
                val t = Tensor.zeros(DType.Int8, 16)
                comm.recv(t, 0, tag = 9) // the withdrawn 2x-limit message is not there to mismatch the size
                t.toFloatArray().all { it == 4f } shouldBe true
            }
        }
    }

    test("the option sets the limit; 0 makes every send wait for its receive; a malformed value is refused") {
        LocalBackendFactory.EAGER_LIMIT_OPTION shouldBe "local.eagerLimit"
        val huge = CommConfig(options = mapOf(LocalBackendFactory.EAGER_LIMIT_OPTION to (64L shl 20).toString()))
        runLocalWorld(2, huge) { comm -> // buffered again: the naive exchange passes
            val other = 1 - comm.rank
            comm.send(Tensor.zeros(DType.Float32, 4 shl 20), other)
            comm.recv(Tensor.zeros(DType.Float32, 4 shl 20), other)
        }
        val zero = CommConfig(timeout = 1.seconds, options = mapOf(LocalBackendFactory.EAGER_LIMIT_OPTION to "0"))
        shouldThrow<CommunicationTimeoutException> {
            runLocalWorld(2, zero) { comm ->
                val other = 1 - comm.rank
                comm.send(Tensor.zeros(DType.Int8, 1), other)
                comm.recv(Tensor.zeros(DType.Int8, 1), other)
            }
        }
        shouldThrow<IllegalArgumentException> {
            Comm.create("local", CommConfig(options = mapOf(LocalBackendFactory.EAGER_LIMIT_OPTION to "lots")))
        }.message!! shouldContain "local.eagerLimit"
    }

    test("sends waiting for receives fail with the communicator when another rank aborts it") {
        val e = shouldThrow<Exception> {
            runLocalWorld(2, short) { comm ->
                if (comm.rank == 0) {
                    comm.send(Tensor.zeros(DType.Int8, 1 shl 20), 1)
                } else {
                    delay(100.milliseconds)
                    error("rank 1 fails before receiving")
                }
            }
        }
        e.message!! shouldContain "rank 1 fails before receiving"
        // and the healthy case still works after a failure elsewhere in the process
        runLocalWorld(2) { comm ->
            coroutineScope {
                val r = async { comm.recv(Tensor.zeros(DType.Int8, 1 shl 20), 1 - comm.rank) }
                comm.send(Tensor.zeros(DType.Int8, 1 shl 20), 1 - comm.rank)
                r.await().byteSize shouldBe (1L shl 20)
            }
        }
    }
})

private fun filled(dtype: DType, value: Float, n: Int): Tensor = Tensor.zeros(dtype, n).fill(value.toDouble())
