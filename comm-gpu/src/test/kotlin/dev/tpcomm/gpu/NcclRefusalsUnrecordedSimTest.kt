@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.PointToPoint
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import dev.tpcomm.gpu.sim.SimulatedWorld
import dev.tpcomm.recvObject
import dev.tpcomm.sendObject
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldBeEmpty
import io.kotest.matchers.shouldBe
import kotlin.time.Duration.Companion.seconds

/**
 * What NCCL and RCCL cannot do (bitwise reductions, dtypes without an NCCL type, tags, ANY_SOURCE,
 * messages to oneself) is refused as every other bad argument is: before the call is recorded, so
 * the flight recorder holds nothing of it and the next collective keeps its number, as on the
 * other backends. Called as a user calls them, on the simulated NCCL.
 */
class NcclRefusalsUnrecordedSimTest : FunSpec({
    val config = CommConfig(timeout = 10.seconds)

    test("refused reductions and messages throw IllegalArgumentException with their message and leave nothing in the flight recorder") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(2, config) { c ->
            val r = c.rank
            val peer = 1 - r
            val dev = Device.Cuda(r)
            val ints = platform.upload(Tensor.of(intArrayOf(1, 2)), dev)
            val shorts = platform.upload(Tensor.zeros(DType.Int16, 2), dev)
            val f = platform.upload(Tensor.of(floatArrayOf(1f, 2f)), dev)
            val lib = "NCCL (simulated)"
            fun refused(message: String, block: suspend () -> Unit) = message to block
            val cases = listOf(
                refused("allReduce: BitwiseAnd is not supported by nccl: $lib has no bitwise reductions; use the mpi or local backend for bitwise ops, or Sum/Product/Min/Max/Avg") {
                    c.allReduce(ints, ReduceOp.BitwiseAnd)
                },
                refused("reduce: BitwiseOr is not supported by nccl: $lib has no bitwise reductions; use the mpi or local backend for bitwise ops, or Sum/Product/Min/Max/Avg") {
                    c.reduce(ints, 0, ReduceOp.BitwiseOr)
                },
                refused("reduceScatter: BitwiseXor is not supported by nccl: $lib has no bitwise reductions; use the mpi or local backend for bitwise ops, or Sum/Product/Min/Max/Avg") {
                    c.reduceScatter(ints, ReduceOp.BitwiseXor)
                },
                refused(
                    "reduceScatterV: nccl cannot reduce Int16: $lib has no int16 type; convert the tensor to Int32 (exact for every Int16 value) " +
                        "and reduce that, or use the mpi or local backend (data movement such as broadcast and allGather carries Int16 as it is)",
                ) {
                    c.reduceScatterV(shorts, listOf(1, 1), ReduceOp.Sum)
                },
                refused("send: tag 3 is not supported by nccl: NCCL matches messages between two ranks by order only; pass tag 0") {
                    c.send(f, peer, 3)
                },
                refused("recv: nccl cannot receive from ANY_SOURCE (NCCL needs the sender's rank); pass the sender's rank") {
                    c.recv(f, Communicator.ANY_SOURCE)
                },
                refused("recv: tag 3 is not supported by nccl: NCCL matches messages between two ranks by order only; pass tag 0 or ANY_TAG") {
                    c.recv(f, peer, 3)
                },
                refused("send: rank $r cannot send to itself on nccl (a lone ncclSend to oneself never completes); copy on the device instead") {
                    c.send(f, r)
                },
                refused("recv: rank $r cannot receive from itself on nccl; copy on the device instead") {
                    c.recv(f, r)
                },
                refused("sendRecv (element 1, a send): tag 3 is not supported by nccl: NCCL matches messages between two ranks by order only; pass tag 0") {
                    c.sendRecv(listOf(PointToPoint.recv(ints, peer), PointToPoint.send(f, peer, 3)))
                },
                refused("sendObject: tag 3 is not supported by nccl: NCCL matches messages between two ranks by order only; pass tag 0") {
                    c.sendObject("x", peer, 3)
                },
                refused("recvObject: nccl cannot receive from ANY_SOURCE (NCCL needs the sender's rank); pass the sender's rank") {
                    c.recvObject<String>(Communicator.ANY_SOURCE)
                },
                refused("sendObject: rank $r cannot send to itself on nccl") {
                    c.sendObject("x", r)
                },
            )
            // Every case is tried before the verdict, so a failure lists every call that left a record.
            val recorded = cases.mapNotNull { (message, call) ->
                val before = c.flightRecorder.snapshot().size
                shouldThrow<IllegalArgumentException> { call() }.message shouldBe message
                c.flightRecorder.snapshot().drop(before).takeIf { it.isNotEmpty() }?.let { "$message -> ${it.map { e -> "${e.operation} #${e.sequence} ${e.state}" }}" }
            }
            // NCCL cannot probe at all: refused as unsupported, also before anything is recorded.
            val before = c.flightRecorder.snapshot().size
            shouldThrow<UnsupportedOperationException> { c.probe(peer) }.message shouldBe
                "probe: nccl cannot inspect a message before receiving it (NCCL has no probe); send the size first (e.g. a one-element Int64 tensor), then the payload"
            val probed = c.flightRecorder.snapshot().drop(before).map { e -> "probe -> ${e.operation} #${e.sequence} ${e.state}" }
            (recorded + probed).shouldBeEmpty()
            c.isAborted shouldBe false
            // The next collective is the first this rank records and numbers, on every rank alike.
            val x = platform.upload(Tensor.of(floatArrayOf(1f)), dev)
            c.allReduce(x)
            platform.download(x).toFloatArray()[0] shouldBe 2f
            val records = c.flightRecorder.snapshot()
            records.map { it.operation } shouldBe listOf("allReduce")
            records.single().sequence shouldBe 1L
            records.single().collectiveSequence shouldBe 1L
        }
    }
})
