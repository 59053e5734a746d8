package dev.tpcomm.mpi

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.allReduceAsync
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainExactly
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.mockk.every
import io.mockk.mockk
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.async
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import java.util.Collections
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import kotlin.concurrent.thread
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/**
 * The natural call path (issue 21): a collective called from a plain `runBlocking` thread, the way
 * a user's training loop calls it, runs on that thread when the communicator's thread is idle
 * (`MpiConfig.callerRunsLimit`), and is handed to the communicator's thread otherwise. Each test
 * records the thread that made the mocked MPI call.
 */
class MpiCallerRunsTest : FunSpec({
    timeout = 60_000

    fun binding(threads: MutableList<String>, onCall: () -> Unit = {}): MpiBinding = mockk<MpiBinding>(relaxed = true).also { b ->
        every { b.abi } returns MpichAbi
        every { b.allreduce(any(), any(), any(), any(), any(), any()) } answers { threads += Thread.currentThread().name.substringBefore(" @"); onCall(); 0 }
        every { b.barrier(any()) } answers { threads += Thread.currentThread().name.substringBefore(" @"); onCall(); 0 }
    }

    /** Runs [block] in `runBlocking` on a fresh thread named [name], as a user's main would, and returns its result. */
    fun <T> onUserThread(name: String = "user-main", block: suspend kotlinx.coroutines.CoroutineScope.() -> T): T {
        var result: Result<T>? = null
        thread(name = name) { result = runCatching { runBlocking(block = block) } }.join()
        return result!!.getOrThrow()
    }

    test("a small all-reduce from runBlocking runs on the caller's thread, with no hand-off") {
        val threads = Collections.synchronizedList(ArrayList<String>())
        val comm = mockCommunicator(binding(threads))
        comm.settle()
        onUserThread {
            repeat(3) { comm.allReduce(Tensor.of(floatArrayOf(1f))) }
        }
        threads shouldContainExactly listOf("user-main", "user-main", "user-main")
        comm.close()
    }

    test("larger than the limit, a limit of 0, under withTimeout and through allReduceAsync: handed to the communicator's thread") {
        val threads = Collections.synchronizedList(ArrayList<String>())
        val comm = mockCommunicator(binding(threads), mpi = MpiConfig(callerRunsLimit = 64))
        comm.settle()
        onUserThread {
            comm.allReduce(Tensor.zeros(DType.Float32, 16)) // 64 bytes: here
            comm.allReduce(Tensor.zeros(DType.Float32, 17)) // 68 bytes: over the limit
            withTimeout(10.seconds) { comm.allReduce(Tensor.zeros(DType.Float32, 1)) } // the deadline must be able to fire
            allReduceAsync(comm, Tensor.zeros(DType.Float32, 1)).await() // the caller means to overlap
        }
        threads shouldContainExactly listOf("user-main", "test-mpi", "test-mpi", "test-mpi")
        val off = mockCommunicator(binding(threads.also { it.clear() }), mpi = MpiConfig(callerRunsLimit = 0))
        off.settle()
        onUserThread { off.allReduce(Tensor.zeros(DType.Float32, 1)) }
        threads shouldContainExactly listOf("test-mpi")
        off.close()
        comm.close()
    }

    test("non-blocking progress never runs on the caller's thread") {
        val threads = Collections.synchronizedList(ArrayList<String>())
        val b = binding(threads)
        every { b.iallreduce(any(), any(), any(), any(), any(), any(), any()) } answers { threads += Thread.currentThread().name.substringBefore(" @"); 0 }
        every { b.test(any(), any(), any()) } returns 0 // never completes: the deadline ends it
        val comm = mockCommunicator(b, CommConfig(worldSize = 2, rank = 0, timeout = 200.milliseconds, checkConsistency = false), MpiConfig(progress = MpiProgress.NonBlocking, abortOnTimeout = false))
        comm.settle()
        shouldThrow<CommunicationTimeoutException> { onUserThread { comm.allReduce(Tensor.zeros(DType.Float32, 1)) } }
        threads shouldContainExactly listOf("test-mpi")
        comm.close()
    }

    test("while the communicator's thread is busy, a later call queues behind it: call order is kept") {
        val calls = Collections.synchronizedList(ArrayList<String>())
        val entered = CountDownLatch(1)
        val release = CountDownLatch(1)
        val b = mockk<MpiBinding>(relaxed = true)
        every { b.abi } returns MpichAbi
        every { b.allreduce(any(), any(), any(), any(), any(), any()) } answers {
            val value = java.lang.foreign.MemorySegment.ofAddress(secondArg<Long>()).reinterpret(4).get(java.lang.foreign.ValueLayout.JAVA_FLOAT, 0)
            calls += "${Thread.currentThread().name.substringBefore(" @")}:$value"
            if (value == 1f) { entered.countDown(); release.await() }
            0
        }
        val comm = mockCommunicator(b)
        comm.settle()
        onUserThread {
            val first = allReduceAsync(comm, Tensor.of(floatArrayOf(1f))) // on the communicator's thread, held there
            entered.await(5, TimeUnit.SECONDS) shouldBe true
            val second = async(start = CoroutineStart.UNDISPATCHED) { comm.allReduce(Tensor.of(floatArrayOf(2f))) }
            release.countDown()
            first.await()
            second.await()
        }
        calls shouldContainExactly listOf("test-mpi:1.0", "test-mpi:2.0")
        comm.close()
    }

    test("closing the tensor from another thread while its all-reduce runs on the caller's thread defers the free until MPI returns") {
        val threads = Collections.synchronizedList(ArrayList<String>())
        val inMpi = CountDownLatch(1)
        val release = CountDownLatch(1)
        val comm = mockCommunicator(binding(threads) { inMpi.countDown(); release.await() })
        comm.settle()
        val t = Tensor.of(floatArrayOf(1f, 2f))
        val address = t.segment.address()
        val reusedWhileInMpi = java.util.concurrent.atomic.AtomicBoolean(false)
        val closer = thread(name = "closer") {
            inMpi.await()
            t.close() // while MPI still writes t
            // Were the memory freed now, the pool would hand this block to another tensor of its size.
            val others = ArrayList<Tensor>()
            while (others.size < 20_000 && !reusedWhileInMpi.get()) {
                others += Tensor.zeros(DType.Float32, 2).also { if (it.segment.address() == address) reusedWhileInMpi.set(true) }
            }
            release.countDown()
            others.forEach { it.close() }
        }
        onUserThread { comm.allReduce(t) }
        closer.join()
        threads shouldContainExactly listOf("user-main")
        reusedWhileInMpi.get() shouldBe false
        comm.close()
    }

    test("a caller released by its withTimeout while its all-reduce is inside MPI: the tensor it closes stays allocated until MPI returns") {
        val threads = Collections.synchronizedList(ArrayList<String>())
        val inMpi = CountDownLatch(1)
        val release = CountDownLatch(1)
        val comm = mockCommunicator(binding(threads) { inMpi.countDown(); release.await() })
        comm.settle()
        val t = Tensor.of(floatArrayOf(1f, 2f))
        val address = t.segment.address()
        // Under withTimeout the call is handed to the communicator's thread; its caller is released at the deadline.
        shouldThrow<CommunicationTimeoutException> { onUserThread { withTimeout(300.milliseconds) { comm.allReduce(t) } } }
        inMpi.await(5, TimeUnit.SECONDS) shouldBe true
        comm.isAborted shouldBe true
        t.close() // the caller is gone, MPI still writes t: the front's retain, handed over, must hold it
        val others = ArrayList<Tensor>()
        var reusedWhileInMpi = false
        while (others.size < 20_000 && !reusedWhileInMpi) {
            others += Tensor.zeros(DType.Float32, 2).also { if (it.segment.address() == address) reusedWhileInMpi = true }
        }
        release.countDown()
        others.forEach { it.close() }
        reusedWhileInMpi shouldBe false
        threads shouldContainExactly listOf("test-mpi")
        comm.close()
    }

    test("non-blocking progress: a caller released while its request is in flight leaves the tensor allocated (MPI may still write it)") {
        val b = binding(Collections.synchronizedList(ArrayList<String>()))
        val issued = CountDownLatch(1)
        every { b.iallreduce(any(), any(), any(), any(), any(), any(), any()) } answers { issued.countDown(); 0 }
        every { b.test(any(), any(), any()) } returns 0 // never completes
        val comm = mockCommunicator(b, CommConfig(worldSize = 2, rank = 0, checkConsistency = false), MpiConfig(progress = MpiProgress.NonBlocking, abortOnTimeout = false))
        comm.settle()
        val t = Tensor.of(floatArrayOf(1f, 2f))
        val address = t.segment.address()
        shouldThrow<CommunicationTimeoutException> { onUserThread { withTimeout(300.milliseconds) { comm.allReduce(t) } } }
        issued.await(5, TimeUnit.SECONDS) shouldBe true
        comm.isAborted shouldBe true
        t.close()
        val others = ArrayList<Tensor>()
        var reused = false
        while (others.size < 20_000 && !reused) {
            others += Tensor.zeros(DType.Float32, 2).also { if (it.segment.address() == address) reused = true }
        }
        others.forEach { it.close() }
        reused shouldBe false
        comm.close()
    }

    test("an MPI error on the caller's thread breaks the communicator like one on its own thread") {
        val threads = Collections.synchronizedList(ArrayList<String>())
        val b = binding(threads)
        every { b.allreduce(any(), any(), any(), any(), any(), any()) } answers { threads += Thread.currentThread().name.substringBefore(" @"); 15 }
        val comm = mockCommunicator(b)
        comm.settle()
        val e = onUserThread { runCatching { comm.allReduce(Tensor.of(floatArrayOf(1f))) }.exceptionOrNull() }
        (e is CommunicationException) shouldBe true
        threads shouldContainExactly listOf("user-main")
        comm.isAborted shouldBe true
        comm.close()
    }

    test("a blocking call on the caller's thread past its deadline is ended by the watchdog's MPI_Abort") {
        val threads = Collections.synchronizedList(ArrayList<String>())
        val release = CountDownLatch(1)
        val b = binding(threads) { release.await() }
        every { b.abort(any(), any()) } answers { release.countDown(); 0 }
        val comm = mockCommunicator(b, CommConfig(worldSize = 2, rank = 0, timeout = 200.milliseconds, checkConsistency = false))
        comm.settle()
        val start = System.nanoTime()
        onUserThread { comm.barrier() }
        (System.nanoTime() - start) / 1_000_000 shouldBeLessThanMillis 5_000
        threads shouldContainExactly listOf("user-main")
        comm.isAborted shouldBe true
        shouldThrow<CommunicationException> { onUserThread { comm.barrier() } }.message!! shouldContain "barrier"
        comm.close()
    }
})

/** Waits until the communicator's thread has parked idle, as it is between a user's calls (it is busy starting up at first). */
private fun MpiCommunicator.settle() {
    val deadline = System.nanoTime() + 5_000_000_000L
    while (!(nativeDispatcher as dev.tpcomm.engine.NativeDispatcher).runHereIfIdle {}) {
        check(System.nanoTime() < deadline) { "the communicator's thread never became idle" }
        Thread.sleep(1)
    }
}

private infix fun Long.shouldBeLessThanMillis(limit: Long) {
    if (this >= limit) throw AssertionError("took $this ms, expected under $limit ms")
}
