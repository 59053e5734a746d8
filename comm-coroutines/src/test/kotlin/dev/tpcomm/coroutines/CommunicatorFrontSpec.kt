@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.coroutines

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.MessageInfo
import dev.tpcomm.NativeLibraryException
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.engine.CommunicatorBackend
import dev.tpcomm.engine.CommunicatorFront
import dev.tpcomm.engine.OperationCall
import dev.tpcomm.engine.OperationFailedSignal
import dev.tpcomm.engine.OperationFailure
import dev.tpcomm.spi.CollectiveOp
import dev.tpcomm.spi.CollectiveSignature
import dev.tpcomm.spi.CollectiveValidator
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldBeEmpty
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.async
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import kotlinx.coroutines.yield
import kotlin.time.Duration
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.minutes
import kotlin.time.TimeSource

/**
 * The front's one order, seen through a scripted backend: what the backend is asked, in which
 * state the tensors and the flight record are when it is, and what the caller gets.
 */
class CommunicatorFrontSpec : FunSpec({
    /** A one-rank backend that runs [script] for every collective and logs what it saw. */
    class Scripted(
        var refuse: OperationFailure? = null,
        timeout: Duration = 1.minutes,
        validator: CollectiveValidator = CollectiveValidator(2, Device.Host, nativeMemory = true),
    ) : CommunicatorBackend() {
        /** The front this backend is composed into: what the tests call. */
        val comm = CommunicatorFront(0, 2, Device.Host, "scripted", FlightRecorder(16, 0, "scripted"), validator, timeout, backend = this)

        /** What [deadlinePassed] was called with, and from which thread. */
        val deadlines = java.util.concurrent.CopyOnWriteArrayList<String>()
        var onDeadline: (FlightRecorder.Entry, OperationCall?) -> Unit = { _, _ -> }
        var recvGate: CompletableDeferred<Unit>? = null

        override fun deadlinePassed(entry: FlightRecorder.Entry, call: OperationCall?) {
            deadlines += "${entry.operation} record=${entry.sequence} call=${call?.sequence} on ${Thread.currentThread().name}"
            onDeadline(entry, call)
        }

        val tracked: Int get() = comm.trackedDeadlines

        val log = ArrayList<String>()
        var script: (OperationCall) -> Any? = { null }
        var onAllocate: () -> Unit = {}

        /** When set, an allocation waits for it (a backend whose allocation waits for a device thread). */
        var allocGate: CompletableDeferred<Unit>? = null

        override suspend fun allocate(call: OperationCall, dtype: DType, shape: List<Int>): Tensor {
            allocGate?.await()
            return Tensor.zeros(dtype, shape).also { onAllocate() }
        }

        override fun notIssued(call: OperationCall, cause: Throwable) {
            log += "not issued ${call.name} #${call.sequence}"
        }

        override fun aborting(cause: Throwable, detail: Int) {
            log += "aborting detail=$detail: ${(cause as? dev.tpcomm.CommunicationException)?.operation}"
        }
        var pending: CompletableDeferred<Any?>? = null

        override fun refusal(operation: String, collective: Boolean): OperationFailure? = refuse

        override fun issue(call: OperationCall): Any? {
            log += "issue ${call.name} #${call.sequence} record=${call.entry.sequence} inFlight=${call.entry.inFlight}"
            return script(call)
        }

        override suspend fun await(call: OperationCall): Any? {
            log += "await ${call.name}"
            return pending!!.await()
        }

        override suspend fun issueSend(entry: FlightRecorder.Entry, tensor: Tensor, dst: Int, tag: Int) {
            log += "send to $dst"
        }

        override suspend fun issueRecv(entry: FlightRecorder.Entry, tensor: Tensor, src: Int, tag: Int): MessageInfo {
            recvGate?.await()
            return MessageInfo(src, tag, tensor.byteSize)
        }

        override suspend fun issueProbe(entry: FlightRecorder.Entry, src: Int, tag: Int): MessageInfo = MessageInfo(src, tag, 0)

        override fun shutdown() {}

        fun signatureOf(call: OperationCall): LongArray = LongArray(CollectiveSignature.SIZE).also { call.encodeSignature(it, 0) }
    }

    test("a bad argument is refused before anything is recorded or issued") {
        val b = Scripted()
        val heap = Tensor.wrap(java.lang.foreign.MemorySegment.ofArray(FloatArray(2)), DType.Float32, 2)
        val e = shouldThrow<IllegalArgumentException> { runBlocking { b.comm.allReduce(heap) } }
        e.message shouldContain "Java heap array"
        b.log.shouldBeEmpty()
        b.comm.flightRecorder.snapshot().shouldBeEmpty()
    }

    test("a sendRecv batch is checked once: its elements are issued without a second check, each recorded as its own send or recv") {
        // dtypeRefusal runs once per tensor check: it counts how often the elements are validated.
        val checks = java.util.concurrent.atomic.AtomicInteger()
        val b = Scripted(validator = CollectiveValidator(2, Device.Host, nativeMemory = true, dtypeRefusal = { checks.incrementAndGet(); null }))
        val out = Tensor.zeros(DType.Float32, 2)
        val into = Tensor.zeros(DType.Float32, 2)
        val infos = runBlocking { b.comm.sendRecv(listOf(dev.tpcomm.PointToPoint.send(out, 1, 5), dev.tpcomm.PointToPoint.recv(into, 1, 5))) }
        checks.get() shouldBe 2
        infos shouldBe listOf(MessageInfo(1, 5, 8), MessageInfo(1, 5, 8))
        b.log shouldBe listOf("send to 1")
        b.comm.flightRecorder.snapshot().map { it.operation to it.state } shouldBe
            listOf("send" to FlightRecorder.State.Completed, "recv" to FlightRecorder.State.Completed)
    }

    test("an unusable communicator refuses the call by name, records it failed, and never issues it") {
        val cause = IllegalStateException("earlier failure")
        val b = Scripted(refuse = OperationFailure(OperationFailure.ABORTED, "the communicator was aborted: earlier failure", cause))
        val e = shouldThrow<CommunicatorAbortedException> { runBlocking { b.comm.allReduce(Tensor.zeros(DType.Float32, 2)) } }
        e.operation shouldBe "allReduce"
        e.rank shouldBe 0
        e.backend shouldBe "scripted"
        e.cause shouldBe cause
        b.log.shouldBeEmpty()
        b.comm.flightRecorder.snapshot().single().state shouldBe FlightRecorder.State.Failed
    }

    test("the backend gets the call recorded and in flight, numbered from 1 in call order, and the signature the core encodes") {
        val b = Scripted()
        var sig: LongArray? = null
        b.script = { c -> if (c.op == CollectiveOp.Broadcast) sig = b.signatureOf(c); null }
        val t = Tensor.zeros(DType.Float32, 3)
        runBlocking {
            b.comm.allReduce(t, ReduceOp.Max) shouldBe t
            b.comm.broadcast(t, 1) shouldBe t
        }
        b.log shouldBe listOf("issue allReduce #1 record=1 inFlight=true", "issue broadcast #2 record=2 inFlight=true")
        sig!!.toList() shouldBe CollectiveSignature.of(CollectiveOp.Broadcast, t, root = 1).toList()
        b.comm.flightRecorder.snapshot().map { it.state } shouldBe listOf(FlightRecorder.State.Completed, FlightRecorder.State.Completed)
    }

    test("a failure the backend reports becomes its named exception, with rank, backend, operation and sequence") {
        val cases = listOf(
            OperationFailure(OperationFailure.TIMEOUT, "late") to CommunicationTimeoutException::class,
            OperationFailure(OperationFailure.MISMATCH, "differs", ranks = listOf(1), fields = listOf("dtype")) to CollectiveMismatchException::class,
            OperationFailure.native("ncclAllReduce failed", 3) to NativeLibraryException::class,
            OperationFailure(OperationFailure.ABORTED, "gone") to CommunicatorAbortedException::class,
        )
        for ((f, type) in cases) {
            val b = Scripted()
            b.script = { throw OperationFailedSignal(f) }
            val e = runCatching { runBlocking { b.comm.allReduce(Tensor.zeros(DType.Float32, 2)) } }.exceptionOrNull()!!
            e::class shouldBe type
            e.message!! shouldContain f.message
            e.message!! shouldContain "allReduce"
            (e as dev.tpcomm.CommunicationException).sequenceNumber shouldBe 1L
            if (e is NativeLibraryException) e.result shouldBe 3
            if (e is CollectiveMismatchException) e.ranks shouldBe listOf(1)
            b.comm.flightRecorder.snapshot().single().state shouldBe FlightRecorder.State.Failed
        }
    }

    test("a tensor closed while its collective waits stays alive until the front releases it") {
        val b = Scripted()
        b.script = { CommunicatorFront.PENDING }
        b.pending = CompletableDeferred()
        val t = Tensor.zeros(DType.Float32, 2)
        runBlocking {
            val running = async { b.comm.allReduce(t) }
            while (b.log.size < 2) yield()
            t.close()
            t.isClosed shouldBe true
            // Closed, not freed: the collective still holds it, so the backend may still write it.
            t.segment.set(java.lang.foreign.ValueLayout.JAVA_FLOAT, 0, 1f)
            b.pending!!.complete(null)
            running.await() shouldBe t
        }
        b.log shouldBe listOf("issue allReduce #1 record=1 inFlight=true", "await allReduce")
        shouldThrow<IllegalStateException> { t.segment } // released by the front: now freed
    }

    test("the allocating collectives check their input once and hand the backend a fresh output") {
        val b = Scripted()
        var seen: Tensor? = null
        b.script = { c -> seen = c.output; null }
        val out = runBlocking { b.comm.allGather(Tensor.zeros(DType.Float32, 2, 3), dim = -1) }
        out.shape shouldBe listOf(2, 6)
        seen shouldBe out
        shouldThrow<IllegalArgumentException> { runBlocking { b.comm.allGather(Tensor.zeros(DType.Float32, 2), dim = 3) } }
        b.log.size shouldBe 1
    }
    test("a tensor closed after the check but before the front retains it: the numbered call is failed and the backend told, never issued") {
        val b = Scripted()
        val input = Tensor.zeros(DType.Float32, 2)
        b.onAllocate = { input.close() } // another thread's close, between the check and the retain
        shouldThrow<IllegalArgumentException> { runBlocking { b.comm.allGather(input) } }.message shouldContain "closed"
        // The backend lets go of what it prepared; the front's rule then aborts: the peers could never complete #1.
        b.log shouldBe listOf("not issued allGather #1", "aborting detail=0: allGather")
        b.comm.flightRecorder.snapshot().single().state shouldBe FlightRecorder.State.Failed
        b.comm.isAborted shouldBe true
        b.comm.failure!!.message shouldContain "rank 0 gave up allGather #1 before issuing it"
        val next = shouldThrow<CommunicatorAbortedException> { runBlocking { b.comm.allReduce(Tensor.zeros(DType.Float32, 2)) } }
        next.message shouldContain "gave up allGather #1"
    }
    test("abort: the first failure wins, the backend is told once, later calls are refused naming it, and close still runs") {
        val b = Scripted()
        b.comm.abort("the user's own watchdog fired") shouldBe true
        b.comm.abort("again") shouldBe false
        b.log shouldBe listOf("aborting detail=0: abort")
        b.comm.isAborted shouldBe true
        val e = shouldThrow<CommunicatorAbortedException> { runBlocking { b.comm.allReduce(Tensor.zeros(DType.Float32, 2)) } }
        e.message shouldContain "the user's own watchdog fired"
        e.operation shouldBe "allReduce"
        shouldThrow<CommunicatorAbortedException> { runBlocking { b.comm.send(Tensor.zeros(DType.Float32, 2), 1) } }
        b.comm.flightRecorder.snapshot().last().state shouldBe FlightRecorder.State.Failed
        b.comm.close()
        b.comm.isClosed shouldBe true
        b.log.size shouldBe 1
    }

    test("deadlines run from the call: a collective still waiting past the timeout is handed to the backend once, off the caller's thread, and ends named") {
        val b = Scripted(timeout = 200.milliseconds)
        b.script = { CommunicatorFront.PENDING }
        b.pending = CompletableDeferred()
        b.onDeadline = { entry, call ->
            // What a backend does: end the call with a timeout (and abort what it must).
            b.pending!!.completeExceptionally(OperationFailedSignal(OperationFailure(OperationFailure.TIMEOUT, "${entry.operation} waited too long")))
            call shouldBe call
        }
        val began = TimeSource.Monotonic.markNow()
        val e = shouldThrow<CommunicationTimeoutException> { runBlocking { b.comm.allReduce(Tensor.zeros(DType.Float32, 2)) } }
        val took = began.elapsedNow()
        e.operation shouldBe "allReduce"
        e.sequenceNumber shouldBe 1L
        // Never before the timeout; at most about two watchdog periods (20 ms each here) after it, with room for a slow machine.
        (took >= 200.milliseconds) shouldBe true
        (took < 1_500.milliseconds) shouldBe true
        b.deadlines.size shouldBe 1
        b.deadlines.single() shouldContain "allReduce record=1 call=1 on tpcomm-watchdog"
        b.comm.flightRecorder.snapshot().single().state shouldBe FlightRecorder.State.Failed
    }

    test("deadlines cover point-to-point calls too, and a call that finished in time is never reported") {
        val b = Scripted(timeout = 150.milliseconds)
        b.recvGate = CompletableDeferred()
        b.onDeadline = { _, _ -> b.recvGate!!.completeExceptionally(OperationFailedSignal(OperationFailure(OperationFailure.TIMEOUT, "no message"))) }
        runBlocking {
            b.comm.send(Tensor.zeros(DType.Float32, 2), 1) // completes at once
            b.comm.allReduce(Tensor.zeros(DType.Float32, 2)) // completes in issue
            val e = shouldThrow<CommunicationTimeoutException> { b.comm.recv(Tensor.zeros(DType.Float32, 2), 1) }
            e.operation shouldBe "recv"
        }
        b.deadlines.size shouldBe 1
        b.deadlines.single() shouldContain "recv record=3 call=null"
    }

    test("deadlines keep no finished call: a million calls leave the queue about empty") {
        val b = Scripted(timeout = 1.minutes)
        val t = Tensor.zeros(DType.Float32, 1)
        runBlocking { repeat(1_000_000) { b.comm.allReduce(t) } }
        (b.tracked <= 1) shouldBe true
    }

    test("an allocating collective is recorded and timed before its output is allocated: an allocation that waits past the deadline is handed to the backend with its call") {
        val b = Scripted(timeout = 200.milliseconds)
        b.allocGate = CompletableDeferred()
        var seenOutput: Tensor? = Tensor.zeros(DType.Float32, 1)
        b.onDeadline = { _, call ->
            seenOutput = call!!.output // still null: the allocation never returned
            b.allocGate!!.completeExceptionally(OperationFailedSignal(OperationFailure(OperationFailure.TIMEOUT, "its allocation never came")))
        }
        val began = TimeSource.Monotonic.markNow()
        // Bounded: a front that allocates before it records never times the allocation.
        val e = shouldThrow<CommunicationTimeoutException> { runBlocking { withTimeout(5_000) { b.comm.allGather(Tensor.zeros(DType.Float32, 2)) } } }
        val took = began.elapsedNow()
        e.operation shouldBe "allGather"
        e.sequenceNumber shouldBe 1L
        e.message!! shouldContain "its allocation never came"
        (took >= 200.milliseconds) shouldBe true
        (took < 1_500.milliseconds) shouldBe true
        seenOutput shouldBe null
        b.deadlines.single() shouldContain "allGather record=1 call=1 on tpcomm-watchdog"
        // Nothing issued; the backend is told the numbered call was given up (its peers cannot complete it).
        b.log shouldBe listOf("not issued allGather #1", "aborting detail=0: allGather")
        b.comm.flightRecorder.snapshot().single().state shouldBe FlightRecorder.State.Failed
        // The communicator aborted (the front's rule): the next collective is refused, naming allGather #1.
        b.allocGate = null
        val next = shouldThrow<CommunicatorAbortedException> { runBlocking { b.comm.allReduce(Tensor.zeros(DType.Float32, 2)) } }
        next.message shouldContain "allGather #1"
        b.log shouldBe listOf("not issued allGather #1", "aborting detail=0: allGather")
    }

    test("a deadline never fires before the timeout, however late the watchdog's scans run") {
        // Another communicator's scan that takes 120 ms makes every scan of the one watchdog thread
        // late by up to that much. A call must still be timed from when it was made.
        val slow = dev.tpcomm.engine.DeadlineWatchdog.register({ _ -> Thread.sleep(120) }, 1)
        try {
            repeat(5) { i ->
                val b = Scripted(timeout = 200.milliseconds)
                b.allocGate = CompletableDeferred()
                b.onDeadline = { _, _ ->
                    b.allocGate!!.completeExceptionally(OperationFailedSignal(OperationFailure(OperationFailure.TIMEOUT, "late")))
                }
                Thread.sleep(37L * i) // calls at different phases of the slow scans
                val began = TimeSource.Monotonic.markNow()
                shouldThrow<CommunicationTimeoutException> { runBlocking { withTimeout(5_000) { b.comm.allGather(Tensor.zeros(DType.Float32, 2)) } } }
                val took = began.elapsedNow()
                withClue("call $i timed out after $took") { (took >= 200.milliseconds) shouldBe true }
                b.comm.close()
            }
        } finally {
            slow.close()
        }
    }

    test("no deadline with an infinite timeout: nothing is tracked") {
        val b = Scripted(timeout = Duration.INFINITE)
        b.script = { CommunicatorFront.PENDING }
        b.pending = CompletableDeferred()
        runBlocking {
            val running = async { b.comm.allReduce(Tensor.zeros(DType.Float32, 2)) }
            while (b.log.size < 2) yield()
            b.tracked shouldBe 0
            b.pending!!.complete(null)
            running.await()
        }
    }
})
