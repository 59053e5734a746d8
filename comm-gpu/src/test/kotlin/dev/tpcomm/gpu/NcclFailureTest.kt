@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.Communicator
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.engine.NativeDispatcher
import dev.tpcomm.gpu.MockPlatform.Companion.A
import dev.tpcomm.gpu.MockPlatform.Companion.COMM
import dev.tpcomm.gpu.MockPlatform.Companion.dev
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.longs.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.types.shouldBeInstanceOf
import io.mockk.every
import io.mockk.verify
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import kotlinx.coroutines.withTimeout
import java.util.concurrent.atomic.AtomicInteger
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/** Error-code mapping, asynchronous errors, timeouts, cancellation and refused arguments, against MockK doubles. */
class NcclFailureTest : FunSpec({
    test("a failed library call maps its code to NcclException, aborts once, and fails later calls with the cause") {
        val p = MockPlatform()
        every { p.api.allReduce(any(), any(), any(), any(), any(), any(), any()) } returns NcclResult.INVALID_ARGUMENT
        every { p.api.getLastError(any()) } returns "pointer is not on this device"
        val c = p.connect()
        val e = shouldThrow<NcclException> { c.allReduce(dev(A, DType.Float32, 4)) }
        e.result shouldBe NcclResult.INVALID_ARGUMENT
        e.message shouldContain "ncclAllReduce failed: ncclInvalidArgument (4): error text 4 — pointer is not on this device"
        e.operation shouldBe "allReduce"
        e.sequenceNumber shouldBe 1
        e.backend shouldBe "nccl"
        e.flightRecorderDump!! shouldContain "\"operation\":\"allReduce\""
        val later = shouldThrow<CommunicatorAbortedException> { c.broadcast(dev(A, DType.Float32, 4), 0) }
        later.cause shouldBe e
        later.sequenceNumber shouldBe 2
        verify(exactly = 1) { p.api.commAbort(COMM) }
        verify(exactly = 0) { p.api.broadcast(any(), any(), any(), any(), any(), any(), any()) }
        c.close()
        verify(exactly = 0) { p.api.commDestroy(any()) }
    }

    test("every ncclResult_t code has a name and a hint") {
        for (code in 0..8) NcclResult.name(code) shouldBe listOf(
            "ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError", "ncclInvalidArgument",
            "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress", "ncclTimeout",
        )[code]
        NcclResult.name(42) shouldBe "ncclResult(42)"
        NcclResult.hint(NcclResult.REMOTE_ERROR) shouldContain "peer"
    }

    test("a runtime failure (event query error) is an NcclException flagged as a runtime error") {
        val p = MockPlatform()
        every { p.runtime.eventQuery(any()) } returns 719
        val c = p.connect()
        val e = shouldThrow<NcclException> { c.allReduce(dev(A, DType.Float32, 4)) }
        e.isRuntimeError shouldBe true
        e.result shouldBe 719
        e.message shouldContain "CUDA eventQuery failed with error 719: cuda error 719"
        verify { p.api.commAbort(COMM) }
    }

    test("an asynchronous error reported by ncclCommGetAsyncError while waiting aborts the communicator") {
        val p = MockPlatform()
        every { p.runtime.eventQuery(any()) } returns DeviceRuntime.ERROR_NOT_READY
        val c = p.connect()
        every { p.api.commGetAsyncError(COMM, any()) } answers { secondArg<IntArray>()[0] = NcclResult.REMOTE_ERROR; 0 }
        val e = shouldThrow<NcclException> { c.allReduce(dev(A, DType.Float32, 4)) }
        e.result shouldBe NcclResult.REMOTE_ERROR
        e.message shouldContain "ncclCommGetAsyncError failed: ncclRemoteError (6)"
        verify(exactly = 1) { p.api.commAbort(COMM) }
        shouldThrow<CommunicatorAbortedException> { c.barrier() }.cause shouldBe e
    }

    test("an event that never completes times out: ncclCommAbort, CommunicationTimeoutException with the dump, pending and later calls aborted") {
        val p = MockPlatform()
        every { p.runtime.eventQuery(any()) } returns DeviceRuntime.ERROR_NOT_READY
        val c = p.connect(timeout = 300.milliseconds)
        coroutineScope {
            val first = async(start = CoroutineStart.UNDISPATCHED) { runCatching { c.allReduce(dev(A, DType.Float32, 4)) } }
            delay(100) // so the first call's deadline passes clearly before the second's
            val second = async(start = CoroutineStart.UNDISPATCHED) { runCatching { c.broadcast(dev(A, DType.Float32, 4), 0) } }
            val t = first.await().exceptionOrNull()
            t.shouldBeInstanceOf<CommunicationTimeoutException>()
            t.operation shouldBe "allReduce"
            t.flightRecorderDump!! shouldContain "\"state\":\"Failed\""
            val s = second.await().exceptionOrNull()
            s.shouldBeInstanceOf<CommunicatorAbortedException>()
            s.cause shouldBe t
        }
        shouldThrow<CommunicatorAbortedException> { c.allReduce(dev(A, DType.Float32, 4)) }
        // The watchdog's abort is carried out on the native thread, shortly after the callers were released.
        eventuallyVerified { verify(exactly = 1) { p.api.commAbort(COMM) } }
    }

    test("ncclInProgress from an enqueue is waited out through ncclCommGetAsyncError") {
        val p = MockPlatform()
        val c = p.connect()
        val polls = AtomicInteger()
        every { p.api.allReduce(any(), any(), any(), any(), any(), any(), any()) } returns NcclResult.IN_PROGRESS
        every { p.api.commGetAsyncError(COMM, any()) } answers {
            secondArg<IntArray>()[0] = if (polls.incrementAndGet() < 3) NcclResult.IN_PROGRESS else NcclResult.SUCCESS; 0
        }
        c.allReduce(dev(A, DType.Float32, 4))
        (polls.get() >= 3) shouldBe true
        c.isAborted shouldBe false
        c.close()
    }

    test("init that never completes is aborted at the deadline") {
        val p = MockPlatform()
        every { p.api.commInitRankConfig(any(), any(), any(), any(), any()) } answers { firstArg<java.lang.foreign.MemorySegment>().set(java.lang.foreign.ValueLayout.JAVA_LONG, 0, COMM); NcclResult.IN_PROGRESS }
        every { p.api.commGetAsyncError(COMM, any()) } answers { secondArg<IntArray>()[0] = NcclResult.IN_PROGRESS; 0 }
        // Creation has its own deadline (CommConfig.creationTimeout, by default at least 5 minutes): the test sets it.
        val e = shouldThrow<CommunicationTimeoutException> { p.connect(worldSize = 2, rank = 1, timeout = 200.milliseconds, creationTimeout = 200.milliseconds) }
        e.message shouldContain "ncclCommInitRankConfig"
        verify { p.api.commAbort(COMM) }
        verify { p.runtime.streamDestroy(any()) }
    }

    test("init refuses libraries older than 2.18 with BackendUnavailableException") {
        val p = MockPlatform(version = 21705)
        shouldThrow<dev.tpcomm.BackendUnavailableException> { p.connect() }.message shouldContain "2.17.5 is too old"
    }

    test("a cancellation aborts the communicator while the native thread is blocked in a library call") {
        val p = MockPlatform()
        val blocked = java.util.concurrent.CountDownLatch(1)
        val release = java.util.concurrent.CountDownLatch(1)
        val c = p.connect(timeout = 30.seconds)
        // The event query blocks (a driver call stuck on a dead peer) until ncclCommAbort is called.
        every { p.runtime.eventQuery(any()) } answers { blocked.countDown(); release.await(); DeviceRuntime.ERROR_NOT_READY }
        every { p.api.commAbort(COMM) } answers { release.countDown(); 0 }
        val start = System.nanoTime()
        coroutineScope {
            val job = async(Dispatchers.Default) { c.allReduce(dev(A, DType.Float32, 4)) }
            blocked.await()
            job.cancel()
            // The caller is released at once; the abort is not queued behind the blocked native thread.
            withTimeout(5.seconds) { runCatching { job.await() } }
        }
        eventuallyVerified { verify(exactly = 1) { p.api.commAbort(COMM) } }
        (System.nanoTime() - start) / 1_000_000 shouldBeLessThan 3_000
        c.isAborted shouldBe true
        c.close()
    }

    test("a deadline passes while the native thread is blocked in a library call: the watchdog aborts, the caller gets CommunicationTimeoutException") {
        val p = MockPlatform()
        val release = java.util.concurrent.CountDownLatch(1)
        val c = p.connect(timeout = 500.milliseconds)
        // The event query blocks (a call stuck on a dead peer) until ncclCommAbort is called: as with
        // NCCL's abort flag, which ncclCommAbort sets and the blocked calls poll (init.cc, ncclCommAbort).
        every { p.runtime.eventQuery(any()) } answers { release.await(); DeviceRuntime.ERROR_NOT_READY }
        every { p.api.commAbort(COMM) } answers { release.countDown(); 0 }
        val start = System.nanoTime()
        val e = withTimeout(10.seconds) { runCatching { c.allReduce(dev(A, DType.Float32, 4)) }.exceptionOrNull() }
        val ms = (System.nanoTime() - start) / 1_000_000
        e.shouldBeInstanceOf<CommunicationTimeoutException>()
        e.operation shouldBe "allReduce"
        ms shouldBeLessThan 2_000 // timeout 500 ms, a watchdog period of 50 ms
        eventuallyVerified { verify(exactly = 1) { p.api.commAbort(COMM) } } // from the abort thread, 100 ms later
        c.isAborted shouldBe true
        shouldThrow<CommunicatorAbortedException> { c.barrier() }.cause shouldBe e
        c.close()
    }

    test("cancelling a call in flight aborts the communicator") {
        val p = MockPlatform()
        every { p.runtime.eventQuery(any()) } returns DeviceRuntime.ERROR_NOT_READY
        val c = p.connect(timeout = 30.seconds)
        coroutineScope {
            val job = async(start = CoroutineStart.UNDISPATCHED) { c.allReduce(dev(A, DType.Float32, 4)) }
            delay(100)
            job.cancel()
            runCatching { job.await() }
        }
        c.isAborted shouldBe true
        delay(100)
        verify(exactly = 1) { p.api.commAbort(COMM) }
        shouldThrow<CommunicatorAbortedException> { c.barrier() }
    }

    test("refused before any library call: host tensors, other devices, bitwise ops, old-library Avg and bfloat16, tags, ANY_SOURCE, self sends") {
        val p = MockPlatform()
        // Built directly (the engine's internal constructor) to see the per-call version checks, which
        // connect() never reaches because it refuses libraries older than 2.18.
        val c = NcclCommunicator(
            p.api, p.runtime, DeviceThreads().acquire(p.runtime, 0, "test").first, COMM, MockPlatform.STREAM, 0, 2, Device.Cuda(0), "nccl",
            CommConfig(worldSize = 2), 20907, NcclCommConfig(),
        )
        val host = Tensor.zeros(DType.Float32, 4)
        shouldThrow<IllegalArgumentException> { c.allReduce(host) }.message shouldContain "got a host tensor; copy it to Cuda(index=0) first (no hidden copies are made)"
        shouldThrow<IllegalArgumentException> { c.allReduce(Tensor.wrapDevice(Device.Cuda(1), A, DType.Float32, 4)) }.message shouldContain "Cuda(index=1)"
        shouldThrow<IllegalArgumentException> { c.allReduce(dev(A, DType.Int32, 4), ReduceOp.BitwiseXor) }.message shouldContain "no bitwise reductions"
        shouldThrow<IllegalArgumentException> { c.allReduce(dev(A, DType.Float32, 4), ReduceOp.BitwiseAnd) }.message shouldContain "integer dtypes and Bool only"
        shouldThrow<IllegalArgumentException> { c.reduceScatter(dev(A, DType.Float32, 4), ReduceOp.Avg) }.message shouldContain "Avg needs NCCL 2.10"
        shouldThrow<IllegalArgumentException> { c.broadcast(dev(A, DType.BFloat16, 4), 0) }.message shouldContain "no bfloat16"
        shouldThrow<IllegalArgumentException> { c.send(dev(A, DType.Float32, 4), 1, 3) }.message shouldContain "pass tag 0"
        shouldThrow<IllegalArgumentException> { c.recv(dev(A, DType.Float32, 4), Communicator.ANY_SOURCE) }.message shouldContain "ANY_SOURCE"
        shouldThrow<IllegalArgumentException> { c.send(dev(A, DType.Float32, 4), 0) }.message shouldContain "cannot send to itself"
        shouldThrow<IllegalArgumentException> { c.broadcast(dev(A, DType.Float32, 4), 2) }.message shouldContain "root 2 is out of range"
        shouldThrow<UnsupportedOperationException> { c.probe() }.message shouldContain "send the size first"
        verify(exactly = 0) { p.api.allReduce(any(), any(), any(), any(), any(), any(), any()) }
        verify(exactly = 0) { p.api.send(any(), any(), any(), any(), any(), any()) }
        c.isAborted shouldBe false
        c.allReduce(dev(A, DType.Float32, 4))
        c.close()
    }

    test("an allocating call refused by the library's checks gives up its place in the device's issue order: the next call runs at once") {
        val p = MockPlatform()
        // An old library (2.9) without bfloat16, built directly as in the test above.
        val c = NcclCommunicator(
            p.api, p.runtime, DeviceThreads().acquire(p.runtime, 0, "test").first, COMM, MockPlatform.STREAM, 0, 2, Device.Cuda(0), "nccl",
            CommConfig(worldSize = 2, timeout = 30.seconds), 20907, NcclCommConfig(),
        )
        // The output was allocated (and its place taken) before the bfloat16 check refused the call.
        shouldThrow<IllegalArgumentException> { c.allGather(dev(A, DType.BFloat16, 4)) }.message shouldContain "no bfloat16"
        val start = System.nanoTime()
        withTimeout(5.seconds) { c.allReduce(dev(A, DType.Float32, 4)) }
        (System.nanoTime() - start) / 1_000_000 shouldBeLessThan 2_000 // not held until the refused call's 30 s deadline
        c.isAborted shouldBe false
        c.close()
    }

    test("one rank: an allocating call whose caller is cancelled while it waits for its allocation issues nothing and gives up its place") {
        val p = MockPlatform()
        val c = p.connect(timeout = 30.seconds)
        val blocked = java.util.concurrent.CountDownLatch(1)
        val release = java.util.concurrent.CountDownLatch(1)
        val first = AtomicInteger()
        // The first allocation blocks the native thread until released.
        every { p.runtime.mallocAsync(any(), any(), any()) } answers {
            if (first.getAndIncrement() == 0) { blocked.countDown(); release.await() }
            firstArg<LongArray>()[0] = 0x7000_0000L + first.get() * 0x10000L; 0
        }
        coroutineScope {
            val job = async(Dispatchers.Default) { c.allGather(dev(A, DType.Float32, 4)) }
            blocked.await()
            job.cancel()
            runCatching { job.await() }.exceptionOrNull().shouldBeInstanceOf<kotlinx.coroutines.CancellationException>()
        }
        release.countDown()
        withTimeout(5.seconds) { c.allReduce(dev(A, DType.Float32, 4)) }
        verify(exactly = 0) { p.api.allGather(any(), any(), any(), any(), any(), any()) }
        c.isAborted shouldBe false
        c.close()
        // The output nobody received went back to the device's pool, whose blocks of this stream are freed at its close.
        verify(exactly = 1) { p.runtime.freeAsync(0x7000_0000L + 0x10000L, MockPlatform.STREAM) }
    }

    test("one rank: an allocating call whose input is closed while its output is allocated is given up at once; the next call runs (no peer pairs with it)") {
        val p = MockPlatform()
        val c = p.connect(timeout = 30.seconds)
        val input = dev(A, DType.Float32, 4)
        // The input is closed while the native thread allocates the output: the front cannot retain it.
        every { p.runtime.mallocAsync(any(), any(), any()) } answers { input.close(); firstArg<LongArray>()[0] = 0x7100_0000L; 0 }
        shouldThrow<IllegalArgumentException> { c.allGather(input) }.message shouldContain "closed"
        val start = System.nanoTime()
        withTimeout(5.seconds) { c.allReduce(dev(A, DType.Float32, 4)) }
        (System.nanoTime() - start) / 1_000_000 shouldBeLessThan 2_000 // not held until the given-up call's 30 s deadline
        verify(exactly = 0) { p.api.allGather(any(), any(), any(), any(), any(), any()) }
        c.flightRecorder.snapshot().first { it.operation == "allGather" }.state shouldBe dev.tpcomm.coroutines.FlightRecorder.State.Failed
        c.isAborted shouldBe false
        c.close()
    }
})

/** Retries [check] (a MockK verification) for up to 2 s: a call made by a background thread shortly after the caller was released. */
internal suspend fun eventuallyVerified(check: () -> Unit) {
    val end = System.nanoTime() + 2_000_000_000L
    while (true) {
        try {
            check()
            return
        } catch (e: AssertionError) {
            if (System.nanoTime() > end) throw e
            kotlinx.coroutines.delay(10)
        }
    }
}
