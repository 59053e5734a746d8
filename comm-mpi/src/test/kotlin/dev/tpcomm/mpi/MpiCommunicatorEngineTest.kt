package dev.tpcomm.mpi

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.engine.NativeDispatcher
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
import kotlin.time.Duration.Companion.seconds

private const val SLOT: Long = MpiSignatureProtocol.SLOT_BYTES

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
    // (on by default, one slot all-gather first) is off there and tested on its own further down.
    fun communicator(b: MpiBinding, config: CommConfig = CommConfig(worldSize = 2, rank = 0, checkConsistency = false), mpi: MpiConfig = MpiConfig()): MpiCommunicator =
        mockCommunicator(b, config, mpi)

    /**
     * Makes the slot all-gather of a 2-rank communicator give rank 1 this rank's slot (the same call,
     * carried the same way, by a caller that rank 1 holds: its [MpiSignatureProtocol.DETACHED] flag
     * cleared), then lets [peer] edit the gathered slots (rank 1's starts at [SLOT]).
     * Returns the requests of the polled exchanges.
     */
    fun slotExchange(b: MpiBinding, polling: Boolean = false, peer: (MemorySegment) -> Unit): MutableSet<Long> {
        val requests = java.util.Collections.synchronizedSet(HashSet<Long>())
        fun gather(send: Long, recv: Long) {
            val mine = MemorySegment.ofAddress(send).reinterpret(SLOT)
            val all = MemorySegment.ofAddress(recv).reinterpret(2 * SLOT)
            MemorySegment.copy(mine, 0, all, 0, SLOT)
            MemorySegment.copy(mine, 0, all, SLOT, SLOT)
            all.set(ValueLayout.JAVA_LONG, SLOT + 8, all.get(ValueLayout.JAVA_LONG, SLOT + 8) and MpiSignatureProtocol.DETACHED.inv())
            peer(all)
        }
        val n = MpiBackend.SLOT_LONGS
        every { b.iallgather(any(), n, any(), any(), n, any(), any(), any()) } answers { gather(firstArg(), arg(3)); requests += arg<Long>(7); 0 }
        if (!polling) {
            every { b.allgather(any(), n, any(), any(), n, any(), any()) } answers { gather(firstArg(), arg(3)); 0 }
            // After a call whose caller waited elsewhere (this rank's own included), the next check is
            // the polled MPI_Iallgather (every rank decides alike): its request completes at its first test.
            every { b.test(any(), any(), any()) } answers {
                MemorySegment.ofAddress(secondArg<Long>()).reinterpret(4).set(ValueLayout.JAVA_INT, 0, if (firstArg<Long>() in requests) 1 else 0); 0
            }
        }
        return requests
    }

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
        verify { b.abort(0x44000001L, MpiBackend.ABORT_CODE) }
        comm.isAborted shouldBe true
        comm.close()
    }

    test("a signature that differs on another rank raises CollectiveMismatchException naming ranks and fields, before the operation reaches MPI") {
        val b = binding()
        // The slot all-gather: rank 1's digest differs from this rank's, and rank 1 carried its part.
        slotExchange(b) { all -> all.set(ValueLayout.JAVA_LONG, SLOT, all.get(ValueLayout.JAVA_LONG, 0) xor 1L) }
        every { b.allgather(any(), MpiBackend.SIG_LEN, any(), any(), MpiBackend.SIG_LEN, any(), any()) } answers {
            val mine = MemorySegment.ofAddress(firstArg<Long>()).reinterpret(8L * MpiBackend.SIG_LEN)
            val all = MemorySegment.ofAddress(arg<Long>(3)).reinterpret(16L * MpiBackend.SIG_LEN)
            MemorySegment.copy(mine, 0, all, 0, 8L * MpiBackend.SIG_LEN)
            MemorySegment.copy(mine, 0, all, 8L * MpiBackend.SIG_LEN, 8L * MpiBackend.SIG_LEN)
            all.setAtIndex(ValueLayout.JAVA_LONG, MpiBackend.SIG_LEN + 2L, DType.Int32.ordinal.toLong()) // rank 1's dtype
            0
        }
        val comm = communicator(b, CommConfig(worldSize = 2, rank = 0)) // the default: checked
        val t = Tensor.of(floatArrayOf(1f))
        val e = shouldThrow<CollectiveMismatchException> { comm.allReduce(t) }
        e.ranks shouldBe listOf(1)
        e.fields shouldContain "dtype"
        e.message shouldContain "Int32"
        verify(exactly = 0) { b.allreduce(any(), any(), any(), any(), any(), any()) } // the user's all-reduce never ran
        t.getDouble(0) shouldBe 1.0 // nor was it reduced from the slots
        comm.close()
    }

    test("by default each collective's check is one all-gather of 64-byte slots; a small all-reduce, broadcast or barrier rides in it; false turns it off") {
        val b = binding()
        // Rank 1 called the same; its slot carries 10, 20, 30 where it carries elements.
        slotExchange(b) { all -> for (i in 0 until 3) all.set(ValueLayout.JAVA_FLOAT, SLOT + 16 + 4L * i, 10f * (i + 1)) }
        val comm = communicator(b, CommConfig(worldSize = 2, rank = 0))
        val small = Tensor.of(floatArrayOf(1f, 2f, 3f))
        comm.allReduce(small)
        (0 until 3).map { small.getDouble(it.toLong()) } shouldBe listOf(11.0, 22.0, 33.0)
        verify(exactly = 1) { b.allgather(any(), MpiBackend.SLOT_LONGS, MpichAbi.int64Type, any(), MpiBackend.SLOT_LONGS, MpichAbi.int64Type, any()) }
        verify(exactly = 0) { b.allreduce(any(), any(), any(), any(), any(), any()) }
        comm.allReduce(small, ReduceOp.Avg)
        (0 until 3).map { small.getDouble(it.toLong()) } shouldBe listOf(10.5, 21.0, 31.5) // (11 + 10) / 2, ...
        val ints = Tensor.of(intArrayOf(7, -3, 5))
        comm.allReduce(ints, ReduceOp.Max) // rank 1's slot reads 10f's bits as an int: a large positive one
        ints.getLong(0) shouldBe java.lang.Float.floatToRawIntBits(10f).toLong()
        comm.broadcast(small, root = 1) // rank 1's slot holds the root's elements
        (0 until 3).map { small.getDouble(it.toLong()) } shouldBe listOf(10.0, 20.0, 30.0)
        comm.barrier()
        verify(exactly = 0) { b.allreduce(any(), any(), any(), any(), any(), any()) }
        verify(exactly = 0) { b.bcast(any(), any(), any(), any(), any()) }
        verify(exactly = 0) { b.barrier(any()) }
        verify(exactly = 0) { b.allgather(any(), MpiBackend.SIG_LEN, any(), any(), any(), any(), any()) }
        // 13 floats (52 bytes) do not fit in a slot's 48: the all-reduce follows the check.
        comm.allReduce(Tensor.zeros(DType.Float32, 13))
        io.mockk.verifyOrder {
            b.allgather(any(), MpiBackend.SLOT_LONGS, MpichAbi.int64Type, any(), MpiBackend.SLOT_LONGS, MpichAbi.int64Type, any())
            b.allreduce(-1L, any(), 13, MpichAbi.datatype(DType.Float32), MpichAbi.op(ReduceOp.Sum), any())
        }
        // PreMulSum scales each rank's input: MPI reduces it, after the check.
        comm.allReduce(Tensor.of(floatArrayOf(1f)), ReduceOp.PreMulSum(2.0))
        verify(exactly = 1) { b.allreduce(-1L, any(), 1, any(), any(), any()) }
        comm.close()
        val off = mockk<MpiBinding>(relaxed = true).also { every { it.abi } returns MpichAbi }
        val unchecked = communicator(off, CommConfig(worldSize = 2, rank = 0, checkConsistency = false))
        unchecked.allReduce(Tensor.of(floatArrayOf(1f, 2f, 3f)))
        verify(exactly = 1) { off.allreduce(any(), any(), any(), any(), any(), any()) }
        verify(exactly = 0) { off.allgather(any(), any(), any(), any(), any(), any(), any()) }
        unchecked.close()
    }

    test("after a call whose peer's caller could be released, the next check is polled and that peer's abort notice ends it (issue 32 finding 4)").config(timeout = 60.seconds) {
        val b = binding()
        // Rank 1 called the same, its caller waiting elsewhere (awaitAll(timeout), withTimeout): it may give up.
        slotExchange(b) { all -> all.set(ValueLayout.JAVA_LONG, SLOT + 8, all.get(ValueLayout.JAVA_LONG, SLOT + 8) or MpiSignatureProtocol.DETACHED) }
        val notice = java.util.concurrent.atomic.AtomicLong(0L)
        every { b.irecv(any(), any(), any(), any(), MpiAbortNotices.ABORT_TAG, any(), any()) } answers { notice.set(arg(6)); 0 }
        // Rank 1 gave up and never joins the next exchange; its notice (source 1) arrives once this
        // rank is in that exchange (sent when rank 1's own call returned, with this rank's).
        val polled = java.util.concurrent.atomic.AtomicBoolean(false)
        every { b.iallgather(any(), any(), any(), any(), any(), any(), any(), any()) } answers { polled.set(true); 0 }
        every { b.test(any(), any(), any()) } answers {
            val arrived = polled.get() && notice.get() != 0L && firstArg<Long>() == notice.get()
            MemorySegment.ofAddress(secondArg<Long>()).reinterpret(4).set(ValueLayout.JAVA_INT, 0, if (arrived) 1 else 0)
            if (arrived) MemorySegment.ofAddress(thirdArg<Long>()).reinterpret(MpichAbi.statusLayout.size).set(ValueLayout.JAVA_INT, 8, 1)
            0
        }
        val comm = communicator(b, CommConfig(worldSize = 2, rank = 0))
        comm.allReduce(Tensor.of(floatArrayOf(1f)))
        verify(exactly = 1) { b.allgather(any(), MpiBackend.SLOT_LONGS, MpichAbi.int64Type, any(), MpiBackend.SLOT_LONGS, MpichAbi.int64Type, any()) }
        val e = shouldThrow<CommunicatorAbortedException> { comm.allReduce(Tensor.of(floatArrayOf(1f))) }
        e.message shouldContain "rank 1 aborted the communicator"
        // The second check was the polled MPI_Iallgather, not a second blocking MPI_Allgather rank 1 never joins.
        verify(exactly = 1) { b.iallgather(any(), MpiBackend.SLOT_LONGS, MpichAbi.int64Type, any(), MpiBackend.SLOT_LONGS, MpichAbi.int64Type, any(), any()) }
        verify(exactly = 1) { b.allgather(any(), MpiBackend.SLOT_LONGS, MpichAbi.int64Type, any(), MpiBackend.SLOT_LONGS, MpichAbi.int64Type, any()) }
        comm.isAborted shouldBe true
        comm.close()
    }

    test("a rank that cannot carry its part in its slot makes every rank issue the operation") {
        val b = binding()
        // Rank 1 agrees on the call but did not carry its part (a CUDA-aware device pointer, say).
        slotExchange(b) { all -> all.set(ValueLayout.JAVA_LONG, SLOT + 8, 0L) }
        val comm = communicator(b, CommConfig(worldSize = 2, rank = 0))
        val t = Tensor.of(floatArrayOf(1f, 2f))
        comm.allReduce(t)
        verify(exactly = 1) { b.allreduce(-1L, any(), 2, MpichAbi.datatype(DType.Float32), MpichAbi.op(ReduceOp.Sum), any()) }
        t.getDouble(1) shouldBe 2.0 // the (mocked) MPI call's result: nothing reduced from the slots
        comm.close()
    }

    test("non-blocking progress: the slot exchange is polled and never carries the operation, which MPI then runs") {
        val b = binding()
        val requests = slotExchange(b, polling = true) { all -> all.set(ValueLayout.JAVA_FLOAT, SLOT + 16, 5f) }
        every { b.iallreduce(any(), any(), any(), any(), any(), any(), any()) } answers { requests += arg<Long>(6); 0 }
        // The exchange's and the operation's requests complete at their first test; the abort notices' receives never do.
        every { b.test(any(), any(), any()) } answers {
            MemorySegment.ofAddress(secondArg<Long>()).reinterpret(4).set(ValueLayout.JAVA_INT, 0, if (firstArg<Long>() in requests) 1 else 0); 0
        }
        val comm = communicator(b, CommConfig(worldSize = 2, rank = 0), MpiConfig(progress = MpiProgress.NonBlocking))
        val t = Tensor.of(floatArrayOf(1f))
        comm.allReduce(t)
        t.getDouble(0) shouldBe 1.0 // the (mocked) MPI call's result: nothing reduced from the slots
        io.mockk.verifyOrder {
            b.iallgather(any(), MpiBackend.SLOT_LONGS, any(), any(), MpiBackend.SLOT_LONGS, any(), any(), any())
            b.iallreduce(-1L, any(), 1, MpichAbi.datatype(DType.Float32), MpichAbi.op(ReduceOp.Sum), any(), any())
        }
        comm.close()
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
