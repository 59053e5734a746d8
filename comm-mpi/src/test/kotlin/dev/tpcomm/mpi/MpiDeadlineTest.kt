package dev.tpcomm.mpi

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.Tensor
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldBeEmpty
import io.kotest.matchers.longs.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.mockk.every
import io.mockk.mockk
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext
import kotlinx.coroutines.withTimeout
import java.util.Collections
import java.util.concurrent.CountDownLatch
import kotlin.concurrent.thread
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/**
 * Deadlines run from the moment of the call (docs/failures.md), on a mocked
 * MPI: a user's call that waits for the communicator's thread is timed while it waits, not only
 * once it reached MPI.
 */
class MpiDeadlineTest : FunSpec({
    timeout = 60_000

    /** A mocked MPICH whose `MPI_Allreduce` only notes that it was called, in [calls]. */
    fun recordingMpi(calls: MutableList<String>): MpiBinding = mockk<MpiBinding>(relaxed = true).also { b ->
        every { b.abi } returns MpichAbi
        every { b.allreduce(any(), any(), any(), any(), any(), any()) } answers { calls += "allreduce"; 0 }
    }

    /**
     * The user's own code holds [comm]'s thread for [holdMillis] (a long host loop in
     * `withContext(nativeDispatcher)`) while a plain thread's `runBlocking` calls `allReduce` on a
     * fresh tensor; returns what that call ended with and how long it took, in ms, once the hold ended.
     */
    fun allReduceQueuedBehindUserBlock(comm: MpiCommunicator, holdMillis: Long): Pair<Result<Any>, Long> {
        val busy = CountDownLatch(1)
        val hog = thread { runBlocking { withContext(comm.nativeDispatcher) { busy.countDown(); Thread.sleep(holdMillis) } } }
        busy.await()
        var result: Result<Any>? = null
        val began = System.nanoTime()
        thread(name = "user-main") { result = runCatching { runBlocking { comm.allReduce(Tensor.of(floatArrayOf(1f))) } } }.join()
        val tookMillis = (System.nanoTime() - began) / 1_000_000
        hog.join()
        return result!! to tookMillis
    }

    test("a call queued behind work on the communicator's thread is timed from its call and never reaches MPI") {
        val calls = Collections.synchronizedList(ArrayList<String>())
        // Default MpiConfig: Blocking progress and abortOnTimeout (the mocked MPI_Abort returns).
        val comm = mockCommunicator(recordingMpi(calls), CommConfig(worldSize = 2, rank = 0, checkConsistency = false, timeout = 300.milliseconds))
        val (result, tookMillis) = allReduceQueuedBehindUserBlock(comm, 3_000)
        val e = shouldThrow<CommunicationTimeoutException> { result.getOrThrow() }
        e.operation shouldBe "allReduce"
        e.sequenceNumber shouldBe 1L
        calls.shouldBeEmpty() // the call never reached MPI: the communicator broke at its deadline
        println("MpiDeadlineTest: the queued call ended after $tookMillis ms (timeout 300 ms; the thread was held 3,000 ms)")
        tookMillis shouldBeLessThan 1_500L // released at its deadline (before: 463 or 3,021 ms, whenever the thread freed)
        comm.isAborted shouldBe true
        comm.close()
    }

    test("with abortOnTimeout = false, a call queued behind a user's block on the communicator's thread is released at its deadline, not when the thread frees") {
        val calls = Collections.synchronizedList(ArrayList<String>())
        val comm = mockCommunicator(
            recordingMpi(calls), CommConfig(worldSize = 2, rank = 0, checkConsistency = false, timeout = 300.milliseconds), MpiConfig(abortOnTimeout = false),
        )
        val (result, tookMillis) = allReduceQueuedBehindUserBlock(comm, 3_000)
        shouldThrow<CommunicationTimeoutException> { result.getOrThrow() }.operation shouldBe "allReduce"
        tookMillis shouldBeLessThan 1_500L // its deadline is 0.3 s (plus up to two watchdog periods); the thread is held 3 s
        comm.isAborted shouldBe true
        calls.shouldBeEmpty() // released while queued: it never starts, also once the thread frees
        comm.close()
    }

    test("a call its caller gives up while it is queued for the communicator's thread never reaches MPI and aborts the communicator") {
        val calls = Collections.synchronizedList(ArrayList<String>())
        val b = recordingMpi(calls)
        val comm = mockCommunicator(b, CommConfig(worldSize = 2, rank = 0, checkConsistency = false, timeout = 30.seconds))
        val busy = CountDownLatch(1)
        val hog = thread { runBlocking { withContext(comm.nativeDispatcher) { busy.countDown(); Thread.sleep(1_000) } } }
        busy.await()
        // MPI pairs the ranks' collectives by order: a numbered call that never starts must not leave the next one to meet the peers' previous.
        // The caller's deadline that aborts the communicator is a CommunicationTimeoutException (docs/failures.md).
        shouldThrow<CommunicationTimeoutException> { runBlocking { withTimeout(200.milliseconds) { comm.allReduce(Tensor.of(floatArrayOf(1f))) } } }
        hog.join()
        comm.isAborted shouldBe true
        shouldThrow<CommunicatorAbortedException> { runBlocking { comm.allReduce(Tensor.of(floatArrayOf(2f))) } }.message!! shouldContain "allReduce #1"
        calls.shouldBeEmpty()
        comm.close()
    }
})
