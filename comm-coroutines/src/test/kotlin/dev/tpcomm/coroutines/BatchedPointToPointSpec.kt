package dev.tpcomm.coroutines

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.DType
import dev.tpcomm.MessageInfo
import dev.tpcomm.PointToPoint
import dev.tpcomm.Tensor
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainAll
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import kotlinx.coroutines.withTimeout
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/** [dev.tpcomm.Communicator.sendRecv] on the local backend, as a user writes it. */
class BatchedPointToPointSpec : FunSpec({
    val config = CommConfig(timeout = 20.seconds)

    test("a ring exchange in one batch, receives listed before sends, on 2 to 4 ranks, 4 MiB per message").config(timeout = 60.seconds) {
        for (n in 2..4) {
            val results = runLocalWorld(n, config) { comm ->
                val next = (comm.rank + 1) % n
                val prev = (comm.rank + n - 1) % n
                val out = Tensor.zeros(DType.Int32, 1 shl 20).also { it.fill(comm.rank.toDouble()) }
                val got = Tensor.zeros(DType.Int32, 1 shl 20)
                val infos = comm.sendRecv(listOf(PointToPoint.recv(got, prev, tag = 7), PointToPoint.send(out, next, tag = 7)))
                infos shouldBe listOf(MessageInfo(prev, 7, 4L shl 20), MessageInfo(next, 7, 4L shl 20))
                got.getLong(0) to got.getLong((1L shl 20) - 1)
            }
            results shouldBe List(n) { r -> ((r + n - 1) % n).toLong().let { it to it } }
        }
    }

    test("each element is in the flight record under its own name") {
        runLocalWorld(2, config) { comm ->
            val peer = 1 - comm.rank
            comm.sendRecv(listOf(PointToPoint.send(Tensor.of(intArrayOf(comm.rank)), peer), PointToPoint.recv(Tensor.zeros(DType.Int32, 1), peer)))
            val dump = (comm as FlightRecorded).flightRecorder.dumpJson()
            dump shouldContain "\"send\""
            dump shouldContain "\"recv\""
        }
    }

    test("a bad element is refused before anything is issued, naming the element; the communicator stays usable") {
        runLocalWorld(2, config) { comm ->
            val peer = 1 - comm.rank
            val t = Tensor.of(intArrayOf(comm.rank))
            val e = shouldThrow<IllegalArgumentException> {
                comm.sendRecv(listOf(PointToPoint.send(t, peer), PointToPoint.send(t, 5)))
            }
            e.message!! shouldContain "sendRecv (element 1, a send)"
            val shared = Tensor.zeros(DType.Int32, 1)
            shouldThrow<IllegalArgumentException> {
                comm.sendRecv(listOf(PointToPoint.recv(shared, peer), PointToPoint.recv(shared, peer)))
            }.message!! shouldContain "shares memory"
            // Nothing of the refused batches was sent: the next exchange gets the right message.
            val got = Tensor.zeros(DType.Int32, 1)
            comm.sendRecv(listOf(PointToPoint.send(Tensor.of(intArrayOf(10 + comm.rank)), peer), PointToPoint.recv(got, peer)))
            got.getLong(0) shouldBe 10L + peer
        }
    }

    test("a batch whose receive is never matched ends at the caller's deadline with CommunicationTimeoutException") {
        runLocalWorld(2, config) { comm ->
            val peer = 1 - comm.rank
            if (comm.rank == 0) {
                val e = shouldThrow<CommunicationTimeoutException> {
                    withTimeout(300.milliseconds) { comm.sendRecv(listOf(PointToPoint.recv(Tensor.zeros(DType.Int32, 1), peer, tag = 3))) }
                }
                e.operation shouldBe "recv"
            }
            // The local backend withdraws a timed-out receive: the communicator is still usable.
            comm.barrier()
            comm.allGather(Tensor.of(intArrayOf(comm.rank))).toIntArray().toList() shouldContainAll listOf(0, 1)
        }
    }
})
