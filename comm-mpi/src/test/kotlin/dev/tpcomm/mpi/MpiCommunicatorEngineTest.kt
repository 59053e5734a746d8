package dev.tpcomm.mpi

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.NativeDispatcher
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContain
import io.kotest.matchers.shouldBe
import io.kotest.matchers.shouldNotBe
import io.kotest.matchers.string.shouldContain
import io.mockk.every
import io.mockk.mockk
import io.mockk.verify
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import kotlin.time.Duration.Companion.milliseconds

/** The engine against a mocked native seam (MPICH ABI): error mapping, checks, timeouts, mismatches. */
class MpiCommunicatorEngineTest : FunSpec({
    fun binding(): MpiBinding = mockk<MpiBinding>(relaxed = true).also { b ->
        every { b.abi } returns MpichAbi
        every { b.errorString(any(), any(), any()) } answers {
            val text = "MPI_ERR_TRUNCATE: message truncated".toByteArray()
            MemorySegment.ofAddress(secondArg<Long>()).reinterpret(512).copyFrom(MemorySegment.ofArray(text))
            MemorySegment.ofAddress(thirdArg<Long>()).reinterpret(4).set(ValueLayout.JAVA_INT, 0, text.size)
            0
        }
    }

    // The exact-call tests below are about each operation's own MPI call: the consistency check
    // (on by default, one digest all-reduce first) is off there and tested on its own further down.
    fun communicator(b: MpiBinding, config: CommConfig = CommConfig(worldSize = 2, rank = 0, checkConsistency = false), mpi: MpiConfig = MpiConfig()): MpiCommunicator =
        mockCommunicator(b, config, mpi)

    test("below MPI_THREAD_MULTIPLE every communicator shares one MPI thread, closed with the last communicator") {
        val b = binding()
        val library = MpiLibrary("libmpich.so.12", 0L, "MPICH Version: 4.0.2", MpiImplementation.Mpich)
        val serialized = MpiRuntime(library, b, MpiThreadLevel.Serialized.value, false, -1)
        serialized.sharesOneThread shouldBe true
        val (first, ownsFirst) = serialized.dispatcherFor("a")
        val (second, ownsSecond) = serialized.dispatcherFor("b")
        (first === second) shouldBe true
        ownsFirst shouldBe false
        ownsSecond shouldBe false
        serialized.retain()
        serialized.retain()
        serialized.release()
        first.isClosed shouldBe false
        serialized.release()
        first.isClosed shouldBe true

        val multiple = MpiRuntime(library, b, MpiThreadLevel.Multiple.value, false, -1)
        multiple.sharesOneThread shouldBe false
        val (x, ownsX) = multiple.dispatcherFor("x")
        val (y, ownsY) = multiple.dispatcherFor("y")
        (x === y) shouldBe false
        ownsX shouldBe true
        ownsY shouldBe true
        x.close()
        y.close()
    }

    test("an MPI error becomes a CommunicationException with MPI's error string, and breaks the communicator") {
        val b = binding()
        every { b.allreduce(any(), any(), any(), any(), any(), any()) } returns 15
        val comm = communicator(b)
        val e = shouldThrow<CommunicationException> { comm.allReduce(Tensor.of(floatArrayOf(1f, 2f))) }
        e.message shouldContain "MPI_ERR_TRUNCATE: message truncated"
        e.operation shouldBe "allReduce"
        e.sequenceNumber shouldBe 1L
        e.backend shouldBe "mpi"
        comm.isAborted shouldBe true
        shouldThrow<CommunicatorAbortedException> { comm.barrier() }
        comm.close()
    }

    test("the blocking path passes MPI_IN_PLACE, the count, and the MPICH handles") {
        val b = binding()
        every { b.allreduce(any(), any(), any(), any(), any(), any()) } returns 0
        val comm = communicator(b)
        val t = Tensor.of(floatArrayOf(1f, 2f, 3f))
        comm.allReduce(t, ReduceOp.Max)
        verify { b.allreduce(-1L, t.segment.address(), 3, 0x4c00040aL, 0x58000001L, 0x44000001L) }
        comm.close()
    }

    test("bad arguments fail before any MPI call and leave the communicator usable") {
        val b = binding()
        val comm = communicator(b)
        shouldThrow<IllegalArgumentException> { comm.allReduce(Tensor.of(floatArrayOf(1f)), ReduceOp.BitwiseAnd) }
        shouldThrow<IllegalArgumentException> { comm.broadcast(Tensor.of(floatArrayOf(1f)), 2) }
        shouldThrow<IllegalArgumentException> { comm.reduceScatter(Tensor.zeros(DType.Float32, 3)) }
        shouldThrow<IllegalArgumentException> { comm.send(Tensor.of(floatArrayOf(1f)), 0, -3) }
        verify(exactly = 0) { b.allreduce(any(), any(), any(), any(), any(), any()) }
        verify(exactly = 0) { b.bcast(any(), any(), any(), any(), any()) }
        comm.isAborted shouldBe false
        comm.close()
    }

    test("a non-blocking call past its deadline raises CommunicationTimeoutException with the flight recorder, without MPI_Abort") {
        val b = binding()
        every { b.iallreduce(any(), any(), any(), any(), any(), any(), any()) } returns 0
        every { b.test(any(), any(), any()) } returns 0 // never completes
        val comm = communicator(b, CommConfig(worldSize = 2, rank = 0, timeout = 200.milliseconds, checkConsistency = false), MpiConfig(abortOnTimeout = false))
        val e = shouldThrow<CommunicationTimeoutException> { comm.allReduce(Tensor.of(floatArrayOf(1f))) }
        e.flightRecorderDump shouldNotBe null
        e.flightRecorderDump!! shouldContain "allReduce"
        verify(exactly = 0) { b.abort(any(), any()) }
        shouldThrow<CommunicatorAbortedException> { comm.allReduce(Tensor.of(floatArrayOf(1f))) }
        comm.close()
    }

    test("a blocking call past its deadline is reported by the watchdog, which calls MPI_Abort") {
        val b = binding()
        val release = java.util.concurrent.CountDownLatch(1)
        every { b.barrier(any()) } answers { release.await(); 0 }
        every { b.abort(any(), any()) } answers { release.countDown(); 0 }
        val comm = communicator(b, CommConfig(worldSize = 2, rank = 0, timeout = 200.milliseconds, checkConsistency = false))
        comm.barrier() // returns once the watchdog's MPI_Abort released the mocked barrier
        verify { b.abort(0x44000001L, MpiCommunicator.ABORT_CODE) }
        comm.isAborted shouldBe true
        comm.close()
    }

    test("a signature that differs on another rank raises CollectiveMismatchException naming ranks and fields, before the operation reaches MPI") {
        val b = binding()
        // The digest all-reduce (2 longs, MAX) reports a larger digest elsewhere: rank 1 differs.
        every { b.allreduce(any(), any(), 2, MpichAbi.int64Type, MpichAbi.op(ReduceOp.Max), any()) } answers {
            val mine = MemorySegment.ofAddress(firstArg<Long>()).reinterpret(16)
            val max = MemorySegment.ofAddress(secondArg<Long>()).reinterpret(16)
            max.set(ValueLayout.JAVA_LONG, 0, Long.MAX_VALUE)
            max.set(ValueLayout.JAVA_LONG, 8, mine.get(ValueLayout.JAVA_LONG, 8))
            0
        }
        every { b.allgather(any(), MpiCommunicator.SIG_LEN, any(), any(), MpiCommunicator.SIG_LEN, any(), any()) } answers {
            val mine = MemorySegment.ofAddress(firstArg<Long>()).reinterpret(8L * MpiCommunicator.SIG_LEN)
            val all = MemorySegment.ofAddress(arg<Long>(3)).reinterpret(16L * MpiCommunicator.SIG_LEN)
            MemorySegment.copy(mine, 0, all, 0, 8L * MpiCommunicator.SIG_LEN)
            MemorySegment.copy(mine, 0, all, 8L * MpiCommunicator.SIG_LEN, 8L * MpiCommunicator.SIG_LEN)
            all.setAtIndex(ValueLayout.JAVA_LONG, MpiCommunicator.SIG_LEN + 2L, DType.Int32.ordinal.toLong()) // rank 1's dtype
            0
        }
        val comm = communicator(b, CommConfig(worldSize = 2, rank = 0)) // the default: checked
        val e = shouldThrow<CollectiveMismatchException> { comm.allReduce(Tensor.of(floatArrayOf(1f))) }
        e.ranks shouldBe listOf(1)
        e.fields shouldContain "dtype"
        e.message shouldContain "Int32"
        verify(exactly = 0) { b.allreduce(any(), any(), 1, any(), any(), any()) } // the user's all-reduce never ran
        comm.close()
    }

    test("by default each collective is preceded by one 16-byte digest all-reduce; when the digests agree nothing else moves; false turns it off") {
        val b = binding()
        every { b.allreduce(any(), any(), 2, MpichAbi.int64Type, MpichAbi.op(ReduceOp.Max), any()) } answers {
            MemorySegment.copy(MemorySegment.ofAddress(firstArg<Long>()).reinterpret(16), 0, MemorySegment.ofAddress(secondArg<Long>()).reinterpret(16), 0, 16)
            0
        }
        val comm = communicator(b, CommConfig(worldSize = 2, rank = 0))
        comm.allReduce(Tensor.of(floatArrayOf(1f, 2f, 3f)))
        io.mockk.verifyOrder {
            b.allreduce(any(), any(), 2, MpichAbi.int64Type, MpichAbi.op(ReduceOp.Max), any())
            b.allreduce(-1L, any(), 3, MpichAbi.datatype(DType.Float32), MpichAbi.op(ReduceOp.Sum), any())
        }
        verify(exactly = 0) { b.allgather(any(), any(), any(), any(), any(), any(), any()) }
        comm.close()
        val off = mockk<MpiBinding>(relaxed = true).also { every { it.abi } returns MpichAbi }
        val unchecked = communicator(off, CommConfig(worldSize = 2, rank = 0, checkConsistency = false))
        unchecked.allReduce(Tensor.of(floatArrayOf(1f, 2f, 3f)))
        verify(exactly = 1) { off.allreduce(any(), any(), any(), any(), any(), any()) }
        unchecked.close()
    }

    test("UInt8 Min on MPICH reduces as Int8 with the top bit flipped, and restores the input") {
        val b = binding()
        val seen = ArrayList<Int>()
        every { b.allreduce(any(), any(), any(), any(), any(), any()) } answers {
            seen += MemorySegment.ofAddress(secondArg<Long>()).reinterpret(2).get(ValueLayout.JAVA_BYTE, 0).toInt()
            0
        }
        val comm = communicator(b)
        val t = Tensor.zeros(DType.UInt8, 2).also { it.setLong(0, 200); it.setLong(1, 3) }
        comm.allReduce(t, ReduceOp.Min)
        verify { b.allreduce(-1L, any(), 2, MpichAbi.datatype(DType.Int8), MpichAbi.op(ReduceOp.Min), any()) }
        seen shouldBe listOf(200 xor 0x80)
        t.getLong(0) shouldBe 200L
        comm.close()
    }

    test("calls after close fail with CommunicatorAbortedException; close is idempotent") {
        val comm = communicator(binding())
        comm.close()
        comm.close()
        shouldThrow<CommunicatorAbortedException> { comm.allReduce(Tensor.of(floatArrayOf(1f))) }
    }
})
