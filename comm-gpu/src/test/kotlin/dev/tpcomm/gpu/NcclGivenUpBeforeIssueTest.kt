@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.MockPlatform.Companion.A
import dev.tpcomm.gpu.MockPlatform.Companion.COMM
import dev.tpcomm.gpu.MockPlatform.Companion.dev
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import dev.tpcomm.gpu.sim.SimulatedWorld
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.types.shouldBeInstanceOf
import io.mockk.every
import io.mockk.verify
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import kotlinx.coroutines.withTimeout
import kotlinx.serialization.builtins.serializer
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/**
 * NCCL pairs the ranks' collectives (and each pair's sends and receives) by the order they are
 * issued on a communicator: a rank's n-th `ncclAllReduce` meets the others' n-th (NVIDIA/nccl
 * `src/enqueue.cc`, `ncclEnqueueCheck` appends every call to the communicator's one plan queue; the
 * kernels' channels pair by that order, with no tag or sequence on the wire). A call the front
 * numbered and then gave up before the engine issued it (its caller cancelled while it waited for the
 * device thread or for its output allocation, or a tensor closed meanwhile) leaves a hole in that
 * order: the peers' n-th call would meet this rank's (n+1)-th, and with consistency checks off (the
 * GPU default) their data would mix silently. The engine aborts the communicator instead, as MPI
 * does for a call cancelled before it started.
 */
class NcclGivenUpBeforeIssueTest : FunSpec({
    test("a collective whose caller gave up while it waited for the device thread aborts the communicator; the next call is refused") {
        val d = BlockedDevice(1_000)
        d.whileStuck(worldSize = 2, timeout = 30.seconds) { c ->
            // The user's own guard: give up the step after 200 ms. As on every backend, the caller's
            // deadline that aborts the communicator is a CommunicationTimeoutException (docs/failures.md).
            val own = shouldThrow<CommunicationTimeoutException> { withTimeout(200.milliseconds) { c.allReduce(dev(A, DType.Float32, 4)) } }
            own.message!! shouldContain "caller's deadline"
            own.message!! shouldContain "before it was issued"
            c.isAborted shouldBe true
            val next = shouldThrow<CommunicatorAbortedException> { c.allReduce(dev(A, DType.Float32, 4)) }
            next.message!! shouldContain "allReduce #1"
            next.message!! shouldContain "before it was issued"
        }
        eventuallyVerified { verify(exactly = 1) { d.p.api.commAbort(COMM) } }
        // Both communicators of the mock have the handle COMM: the one all-reduce issued is the stuck one's.
        verify(exactly = 1) { d.p.api.allReduce(any(), any(), any(), any(), any(), COMM, any()) }
    }

    test("an allocating collective whose caller gave up while its output waited for the device thread aborts the communicator") {
        val d = BlockedDevice(1_000)
        d.whileStuck(worldSize = 2, timeout = 30.seconds) { c ->
            // Cancelled by its scope (a sibling failed), not by a deadline: the abort says it was given up.
            val job = async { c.allGather(dev(A, DType.Float32, 4)) }
            delay(200)
            job.cancel()
            shouldThrow<CancellationException> { job.await() }
            c.isAborted shouldBe true
            shouldThrow<CommunicatorAbortedException> { c.allReduce(dev(A, DType.Float32, 4)) }.message!! shouldContain "gave up allGather #1 before issuing it"
        }
        verify(exactly = 0) { d.p.api.allGather(any(), any(), any(), any(), COMM, any()) }
    }

    test("an allocating collective whose input is closed while its output is allocated aborts the communicator") {
        val p = MockPlatform()
        val c = p.connect(worldSize = 2, timeout = 30.seconds)
        val input = dev(A, DType.Float32, 4)
        every { p.runtime.mallocAsync(any(), any(), any()) } answers { input.close(); firstArg<LongArray>()[0] = 0x7100_0000L; 0 }
        shouldThrow<IllegalArgumentException> { c.allGather(input) }.message!! shouldContain "closed"
        c.isAborted shouldBe true
        shouldThrow<CommunicatorAbortedException> { c.allReduce(dev(A, DType.Float32, 4)) }.message!! shouldContain "gave up allGather #1 before issuing it"
        verify(exactly = 0) { p.api.allGather(any(), any(), any(), any(), any(), any()) }
        c.close()
    }

    test("a send whose caller gave up while it waited for the device thread aborts the communicator") {
        val d = BlockedDevice(1_000)
        d.whileStuck(worldSize = 2, timeout = 30.seconds) { c ->
            shouldThrow<CommunicationTimeoutException> { withTimeout(200.milliseconds) { c.send(dev(A, DType.Float32, 4), 1) } }
            c.isAborted shouldBe true
            shouldThrow<CommunicatorAbortedException> { c.send(dev(A, DType.Float32, 4), 1) }.message!! shouldContain "send"
        }
        verify(exactly = 0) { d.p.api.send(any(), any(), any(), any(), COMM, any()) }
    }

    test("simulator: a caller's withTimeout around a collective in flight is a CommunicationTimeoutException, as on every backend, every time") {
        // 20 rounds: cancelling the operation's native job hands it the caller's own exception, and
        // its abort raced the caller's (13 of 40 rounds at 4 ranks got the bare exception before).
        repeat(20) { round ->
            val platform = SimulatedGpuPlatform()
            val world = SimulatedWorld(platform).connect(CommConfig(worldSize = 2, timeout = 30.seconds))
            try {
                // Rank 1 never calls: rank 0's all-reduce is issued and waits for it.
                val e = withClue("round $round") {
                    shouldThrow<CommunicationTimeoutException> {
                        withTimeout(50.milliseconds) { world[0].allReduce(platform.upload(Tensor.of(floatArrayOf(1f)), world[0].device)) }
                    }
                }
                e.message!! shouldContain "caller's deadline"
                e.operation shouldBe "allReduce"
                world[0].isAborted shouldBe true
                shouldThrow<CommunicatorAbortedException> { world[0].barrier() }.cause shouldBe e
            } finally {
                world.forEach { it.close() }
            }
        }
    }

    test("simulator, a user's loop: a step given up before it was issued never mixes its peers' data into the next step") {
        val platform = SimulatedGpuPlatform()
        val timeout = 1.seconds
        val world = SimulatedWorld(platform).connect(CommConfig(worldSize = 2, timeout = timeout))
        val side = SimulatedWorld(platform).connect(CommConfig(worldSize = 2, timeout = 5.seconds))
        try {
            coroutineScope {
                // Device 0's thread is busy: an object collective waits there for a stream whose kernels do not start.
                platform.stall(0, true)
                val busy = (0..1).map { r -> async(Dispatchers.Default) { side[r].allGatherObject("x$r", String.serializer()) } }
                delay(100)
                // Rank 1 runs step 1 and step 2; rank 0 gives up step 1 (its guard) and runs step 2.
                val rank1 = async(Dispatchers.Default) {
                    runCatching {
                        val s1 = world[1].allReduce(platform.upload(Tensor.of(floatArrayOf(1f)), world[1].device))
                        val s2 = world[1].allReduce(platform.upload(Tensor.of(floatArrayOf(20f)), world[1].device))
                        platform.download(s1).toFloatArray()[0] to platform.download(s2).toFloatArray()[0]
                    }
                }
                val step1 = runCatching { withTimeout(200.milliseconds) { world[0].allReduce(platform.upload(Tensor.of(floatArrayOf(2f)), world[0].device)) } }
                step1.exceptionOrNull().shouldBeInstanceOf<CommunicationTimeoutException>()
                platform.stall(0, false)
                busy.forEach { it.await() }
                val step2 = runCatching {
                    withTimeout(5.seconds) { platform.download(world[0].allReduce(platform.upload(Tensor.of(floatArrayOf(10f)), world[0].device))).toFloatArray()[0] }
                }
                // Before: step 2 returned 11 (its 10 plus rank 1's step-1 1). Now it is refused, naming the step given up.
                val e = step2.exceptionOrNull() ?: error("step 2 returned ${step2.getOrNull()}, not an exception")
                e.shouldBeInstanceOf<CommunicatorAbortedException>()
                e.message!! shouldContain "allReduce #1"
                // Rank 1 is never handed mixed data either: its step 1 has no partner and ends at its deadline.
                val r1 = rank1.await()
                (r1.exceptionOrNull() as? CommunicationException ?: error("rank 1 returned ${r1.getOrNull()}")).operation shouldBe "allReduce"
            }
        } finally {
            (world + side).forEach { it.close() }
        }
    }
})
