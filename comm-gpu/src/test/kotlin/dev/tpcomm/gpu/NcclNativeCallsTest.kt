@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.gpu

import dev.tpcomm.PointToPoint
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.gpu.MockPlatform.Companion.A
import dev.tpcomm.gpu.MockPlatform.Companion.B
import dev.tpcomm.gpu.MockPlatform.Companion.CHILD
import dev.tpcomm.gpu.MockPlatform.Companion.COMM
import dev.tpcomm.gpu.MockPlatform.Companion.STREAM
import dev.tpcomm.gpu.MockPlatform.Companion.TEMP_BASE
import dev.tpcomm.gpu.MockPlatform.Companion.dev
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.mockk.every
import io.mockk.verify
import io.mockk.verifyOrder

/** The exact NCCL and runtime calls each operation makes: counts, dtype and op codes, stream, group pairing. */
class NcclNativeCallsTest : FunSpec({
    test("init: device, version, stream, unique id, non-blocking ncclCommInitRankConfig") {
        val p = MockPlatform()
        val c = p.connect()
        verifyOrder {
            p.runtime.setDevice(0)
            p.api.getVersion(any())
            p.runtime.streamCreateNonBlocking(any())
            p.api.getUniqueId(any())
            p.api.commInitRankConfig(any(), 1, any(), 0, NcclCommConfig(blocking = false))
        }
        c.libraryVersionCode shouldBe 23007
        c.libraryVersion shouldBe "${p.api.libraryName} 2.30.7"
        c.close()
    }

    test("allReduce: in place, numel, dtype and op codes, the communicator's stream, an event after it") {
        val p = MockPlatform()
        val c = p.connect()
        val cases = listOf(
            Triple(DType.Float32, ReduceOp.Sum, 7 to 0), Triple(DType.Float64, ReduceOp.Product, 8 to 1),
            Triple(DType.Float16, ReduceOp.Max, 6 to 2), Triple(DType.BFloat16, ReduceOp.Min, 9 to 3),
            Triple(DType.Int8, ReduceOp.Avg, 0 to 4), Triple(DType.UInt8, ReduceOp.Sum, 1 to 0),
            Triple(DType.Int32, ReduceOp.Sum, 2 to 0), Triple(DType.Int64, ReduceOp.Sum, 4 to 0),
        )
        for ((dtype, op, codes) in cases) {
            c.allReduce(dev(A, dtype, 4, 3), op)
            verify(exactly = 1) { p.api.allReduce(A, A, 12, codes.first, codes.second, COMM, STREAM) }
        }
        verify(exactly = cases.size) { p.runtime.eventRecord(any(), STREAM) }
        c.close()
    }

    test("broadcast and reduce pass the root and count") {
        val p = MockPlatform()
        val c = p.connect(worldSize = 4, rank = 2)
        c.broadcast(dev(A, DType.Float32, 10), 3)
        verify { p.api.broadcast(A, A, 10, 7, 3, COMM, STREAM) }
        c.reduce(dev(B, DType.Int64, 2, 5), 1, ReduceOp.Max)
        verify { p.api.reduce(B, B, 10, 4, 2, 1, COMM, STREAM) }
        c.close()
    }

    test("allGatherInto and reduceScatterInto along dim 0 are one library call with the per-rank count") {
        val p = MockPlatform()
        val c = p.connect(worldSize = 4, rank = 1)
        c.allGatherInto(dev(B, DType.Float32, 8, 3), dev(A, DType.Float32, 2, 3))
        verify { p.api.allGather(A, B, 6, 7, COMM, STREAM) }
        c.reduceScatterInto(dev(B, DType.Float32, 2, 3), dev(A, DType.Float32, 8, 3), ReduceOp.Sum)
        verify { p.api.reduceScatter(A, B, 6, 7, 0, COMM, STREAM) }
        verify(exactly = 0) { p.runtime.mallocAsync(any(), any(), any()) }
        c.close()
    }

    test("allGatherInto along dim 1 gathers into a temporary buffer, then one 2-D copy per rank into the columns") {
        val p = MockPlatform()
        val c = p.connect(worldSize = 2, rank = 0)
        // input 3x2 float32 (rows of 8 bytes); output 3x4 (rows of 16 bytes)
        c.allGatherInto(dev(B, DType.Float32, 3, 4), dev(A, DType.Float32, 3, 2), 1)
        verifyOrder {
            p.runtime.mallocAsync(any(), 48, STREAM)
            p.api.allGather(A, TEMP_BASE, 6, 7, COMM, STREAM)
            p.runtime.memcpy2DAsync(B, 16, TEMP_BASE, 8, 8, 3, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, STREAM)
            p.runtime.memcpy2DAsync(B + 8, 16, TEMP_BASE + 24, 8, 8, 3, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, STREAM)
            p.runtime.eventRecord(any(), STREAM)
            p.runtime.freeAsync(TEMP_BASE, STREAM) // stream-ordered: never cudaFree on the native thread
        }
        c.close()
    }

    test("reduceScatterInto along dim 1 rearranges the input into contiguous blocks first") {
        val p = MockPlatform()
        val c = p.connect(worldSize = 2, rank = 1)
        c.reduceScatterInto(dev(B, DType.Float32, 3, 2), dev(A, DType.Float32, 3, 4), ReduceOp.Sum, 1)
        verifyOrder {
            p.runtime.mallocAsync(any(), 48, STREAM)
            p.runtime.memcpy2DAsync(TEMP_BASE, 8, A, 16, 8, 3, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, STREAM)
            p.runtime.memcpy2DAsync(TEMP_BASE + 24, 8, A + 8, 16, 8, 3, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, STREAM)
            p.api.reduceScatter(TEMP_BASE, B, 6, 7, 0, COMM, STREAM)
        }
        c.close()
    }

    test("gather is grouped send/recv in bytes: the root copies its own block and receives the others") {
        val p = MockPlatform()
        val root = p.connect(worldSize = 3, rank = 1)
        val out = root.gather(dev(A, DType.Int32, 4), 1)!!
        out.shape shouldBe listOf(12)
        verifyOrder {
            p.api.groupStart()
            p.api.recv(out.address, 16, NcclDataType.UINT8, 0, COMM, STREAM)
            p.runtime.memcpyAsync(out.address + 16, A, 16, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, STREAM)
            p.api.recv(out.address + 32, 16, NcclDataType.UINT8, 2, COMM, STREAM)
            p.api.groupEnd()
        }
        root.close()
        val q = MockPlatform()
        val leaf = q.connect(worldSize = 3, rank = 2)
        leaf.gather(dev(A, DType.Int32, 4), 1) shouldBe null
        verifyOrder {
            q.api.groupStart()
            q.api.send(A, 16, NcclDataType.UINT8, 1, COMM, STREAM)
            q.api.groupEnd()
        }
        leaf.close()
    }

    test("scatter: the root sends block r to rank r and copies its own; others receive from the root") {
        val p = MockPlatform()
        val root = p.connect(worldSize = 2, rank = 0)
        root.scatter(dev(B, DType.Float64, 3), dev(A, DType.Float64, 6), 0)
        verifyOrder {
            p.api.groupStart()
            p.runtime.memcpyAsync(B, A, 24, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, STREAM)
            p.api.send(A + 24, 24, NcclDataType.UINT8, 1, COMM, STREAM)
            p.api.groupEnd()
        }
        root.close()
        val q = MockPlatform()
        val leaf = q.connect(worldSize = 2, rank = 1)
        leaf.scatter(dev(B, DType.Float64, 3), null, 0)
        verify { q.api.recv(B, 24, NcclDataType.UINT8, 0, COMM, STREAM) }
        leaf.close()
    }

    test("allToAll: one group with a send and a recv per peer and a device copy for itself") {
        val p = MockPlatform()
        val c = p.connect(worldSize = 2, rank = 1)
        val out = c.allToAll(dev(A, DType.Float32, 4))
        verifyOrder {
            p.api.groupStart()
            p.api.send(A, 8, NcclDataType.UINT8, 0, COMM, STREAM)
            p.api.recv(out.address, 8, NcclDataType.UINT8, 0, COMM, STREAM)
            p.runtime.memcpyAsync(out.address + 8, A + 8, 8, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, STREAM)
            p.api.groupEnd()
        }
        verify(exactly = 1) { p.api.groupStart() }
        verify(exactly = 1) { p.api.groupEnd() }
        c.close()
    }

    test("barrier is a one-element int32 sum on a scratch buffer allocated once") {
        val p = MockPlatform()
        val c = p.connect()
        c.barrier()
        c.barrier()
        verify(exactly = 1) { p.runtime.mallocAsync(any(), 4, STREAM) }
        verify(exactly = 2) { p.api.allReduce(TEMP_BASE, TEMP_BASE, 1, NcclDataType.INT32, NcclRedOp.SUM, COMM, STREAM) }
        c.close()
        verify { p.runtime.freeAsync(TEMP_BASE, STREAM) }
        verify(exactly = 0) { p.runtime.free(any()) }
    }

    test("send and recv move bytes (ncclUint8) with the peer") {
        val p = MockPlatform()
        val c = p.connect(worldSize = 2, rank = 0)
        c.send(dev(A, DType.Float32, 5), 1)
        verify { p.api.send(A, 20, NcclDataType.UINT8, 1, COMM, STREAM) }
        val info = c.recv(dev(B, DType.Int64, 2), 1)
        verify { p.api.recv(B, 16, NcclDataType.UINT8, 1, COMM, STREAM) }
        info.source shouldBe 1
        info.byteSize shouldBe 16
        c.close()
    }

    test("a sendRecv batch is one group holding its sends and receives in the given order; a bad element issues nothing") {
        val p = MockPlatform()
        val c = p.connect(worldSize = 3, rank = 1)
        c.sendRecv(
            listOf(
                PointToPoint.send(dev(A, DType.Float32, 4), 2),
                PointToPoint.recv(dev(B, DType.Float32, 4), 0),
                PointToPoint.send(dev(A, DType.Float32, 4), 0),
                PointToPoint.recv(dev(B + 16, DType.Float32, 4), 2),
            ),
        )
        verifyOrder {
            p.api.groupStart()
            p.api.send(A, 16, NcclDataType.UINT8, 2, COMM, STREAM)
            p.api.recv(B, 16, NcclDataType.UINT8, 0, COMM, STREAM)
            p.api.send(A, 16, NcclDataType.UINT8, 0, COMM, STREAM)
            p.api.recv(B + 16, 16, NcclDataType.UINT8, 2, COMM, STREAM)
            p.api.groupEnd()
        }
        verify(exactly = 1) { p.api.groupStart() }
        val e = shouldThrow<IllegalArgumentException> {
            c.sendRecv(listOf(PointToPoint.send(dev(A, DType.Float32, 4), 2), PointToPoint.send(dev(A, DType.Float32, 4), 1)))
        }
        e.message!! shouldContain "itself"
        c.sendRecv(emptyList()) shouldBe emptyList()
        verify(exactly = 1) { p.api.groupStart() }
        c.isAborted shouldBe false
        c.close()
    }

    test("split calls ncclCommSplit with color and key and builds the child from count and rank; a null color passes NCCL_SPLIT_NOCOLOR") {
        val p = MockPlatform()
        every { p.api.commCount(CHILD, any()) } answers { secondArg<IntArray>()[0] = 2; 0 }
        every { p.api.commUserRank(CHILD, any()) } answers { secondArg<IntArray>()[0] = 1; 0 }
        val c = p.connect(worldSize = 4, rank = 3)
        val child = c.split(5, 9)!!
        verify { p.api.commSplit(COMM, 5, 9, any(), NcclCommConfig()) }
        child.rank shouldBe 1
        child.worldSize shouldBe 2
        child.allReduce(dev(A, DType.Float32, 2))
        verify { p.api.allReduce(A, A, 2, 7, 0, CHILD, any()) }
        child.close()
        verify { p.api.commDestroy(CHILD) }
        every { p.api.commSplit(any(), any(), any(), any(), any()) } answers { arg<java.lang.foreign.MemorySegment>(3).set(java.lang.foreign.ValueLayout.JAVA_LONG, 0, 0L); 0 }
        c.split(null) shouldBe null
        verify { p.api.commSplit(COMM, -1, 3, any(), any()) }
        c.close()
    }

    test("close destroys the communicator, the events and the stream") {
        val p = MockPlatform()
        val c = p.connect()
        c.allReduce(dev(A, DType.Float32, 1))
        c.close()
        c.close()
        verify(exactly = 1) { p.api.commDestroy(COMM) }
        verify(exactly = 0) { p.api.commAbort(any()) }
        verify(exactly = 1) { p.runtime.streamDestroy(STREAM) }
        // The completion event and the producer event: by default every call records an event on the
        // legacy default stream (handle 0) that the communicator's stream waits for (docs/gpu.md).
        verify(exactly = 1) { p.runtime.eventRecord(any(), NcclCommunicator.LEGACY_DEFAULT_STREAM) }
        verify(exactly = 1) { p.runtime.streamWaitEvent(STREAM, any()) }
        // And the event that says the retired stream's work is done before it is destroyed (RetiredStreams).
        verify(exactly = 3) { p.runtime.eventDestroy(any()) }
        verify(exactly = 2) { p.runtime.eventRecord(any(), STREAM) } // the call's completion, then the retirement
        // Closing is not a failure (Communicator.isAborted): the front's closed flag says it.
        c.isClosed shouldBe true
        c.isAborted shouldBe false
    }
})
