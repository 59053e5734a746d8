package dev.tpcomm.coroutines

import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldBeEmpty
import io.kotest.matchers.collections.shouldContainExactly
import io.kotest.matchers.longs.shouldBeGreaterThanOrEqual
import io.kotest.matchers.longs.shouldBeInRange
import io.kotest.matchers.nulls.shouldBeNull
import io.kotest.matchers.nulls.shouldNotBeNull
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import kotlinx.serialization.json.Json
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.CountDownLatch
import kotlin.concurrent.thread

class FlightRecorderSpec : FunSpec({
    test("sequence numbers start at 1 and increase; the ring keeps the newest entries, oldest first") {
        val rec = FlightRecorder(3, rank = 2, backend = "test")
        rec.nextSequenceNumber shouldBe 1L
        val entries = (1..5).map { rec.start("op$it", DType.Float32, listOf(it), 4L * it) }
        entries.map { it.sequence } shouldContainExactly listOf(1L, 2L, 3L, 4L, 5L)
        rec.nextSequenceNumber shouldBe 6L
        rec.snapshot().map { it.sequence } shouldContainExactly listOf(3L, 4L, 5L)
        rec.snapshot().map { it.operation } shouldContainExactly listOf("op3", "op4", "op5")
        rec.snapshot().last().shape shouldBe listOf(5)
    }

    test("capacity 0 keeps nothing but still counts; a negative capacity is refused") {
        val rec = FlightRecorder(0)
        rec.start("a").sequence shouldBe 1L
        rec.start("b").sequence shouldBe 2L
        rec.snapshot().shouldBeEmpty()
        shouldThrow<IllegalArgumentException> { FlightRecorder(-1) }.message shouldContain "capacity"
    }

    test("complete and fail: the first call wins, the error is kept, an issued entry reports its running time") {
        val rec = FlightRecorder(8)
        val done = rec.start("allReduce")
        val failed = rec.start("broadcast")
        val running = rec.start("barrier")
        done.complete()
        done.fail(IllegalStateException("late"))
        failed.fail(IllegalStateException("boom"))
        failed.complete()
        Thread.sleep(5)
        val (d, f, r) = rec.snapshot()
        d.state shouldBe FlightRecorder.State.Completed
        d.error.shouldBeNull()
        f.state shouldBe FlightRecorder.State.Failed
        f.error shouldBe "java.lang.IllegalStateException: boom"
        r.state shouldBe FlightRecorder.State.Started
        r.durationMicros.shouldNotBeNull() shouldBeGreaterThanOrEqual 5_000L
        d.durationMicros.shouldNotBeNull() shouldBeGreaterThanOrEqual 0L
        running.complete()
    }

    test("without timing, completed entries carry no duration; failed and running ones do") {
        val rec = FlightRecorder(8, timing = false)
        val done = rec.start("allReduce")
        val failed = rec.start("send")
        rec.start("recv")
        done.complete()
        Thread.sleep(3)
        failed.fail(RuntimeException("x"))
        Thread.sleep(2)
        val (d, f, r) = rec.snapshot()
        d.durationMicros.shouldBeNull()
        d.completedEpochMicros.shouldBeNull()
        // A failure's time is what a diagnosis needs: read once, on the failure path.
        f.durationMicros.shouldNotBeNull() shouldBeGreaterThanOrEqual 3_000L
        f.completedEpochMicros.shouldNotBeNull() shouldBeGreaterThanOrEqual f.startedEpochMicros + 3_000L
        f.error shouldBe "java.lang.RuntimeException: x"
        r.durationMicros.shouldNotBeNull() shouldBeGreaterThanOrEqual 5_000L
    }

    test("a dump states the resolution of its start times") {
        val exact = FlightRecorder(4)
        fun clock(resolution: Long) = object : FlightRecorder.NanoClock {
            override fun nanoTime(): Long = System.nanoTime()
            override val resolutionMicros: Long get() = resolution
        }
        val coarse = FlightRecorder(4, timing = false, clock = clock(50_000L))
        FlightRecorder.parseDump(exact.dumpJson()).clockResolutionMicros shouldBe 0L
        FlightRecorder.parseDump(coarse.dumpJson()).clockResolutionMicros shouldBe 50_000L
        // A dump written before the field existed reads as exact.
        val old = exact.dumpJson().replace(",\"clockResolutionMicros\":0", "")
        (old.contains("clockResolutionMicros")) shouldBe false
        FlightRecorder.parseDump(old).clockResolutionMicros shouldBe 0L
        shouldThrow<IllegalArgumentException> { FlightRecorder(4, clock = clock(-1L)) }
    }

    test("start times come from the given clock, in System.nanoTime's time base") {
        val rec = FlightRecorder(4, timing = false, clock = { System.nanoTime() - 20_000_000L }) // 20 ms behind
        val before = System.currentTimeMillis()
        rec.start("op")
        val record = rec.snapshot().single()
        record.durationMicros.shouldNotBeNull() shouldBeGreaterThanOrEqual 20_000L
        record.startedEpochMicros / 1000 shouldBeInRange (before - 25)..(before - 15)
    }

    test("the wall-clock start lies between the clock before and after start") {
        val rec = FlightRecorder(4)
        val before = System.currentTimeMillis()
        rec.start("op")
        val after = System.currentTimeMillis()
        rec.snapshot().single().startedEpochMicros / 1000 shouldBeInRange (before - 1)..(after + 1)
    }

    test("the dump is JSON with rank, backend and entries") {
        val rec = FlightRecorder(4, rank = 3, backend = "mpi", timing = false)
        rec.start("allReduce", DType.Float32, listOf(2, 2), 16, reduceOp = ReduceOp.Sum).complete()
        val json = Json.parseToJsonElement(rec.dumpJson()).toString()
        json shouldContain "\"rank\":3"
        json shouldContain "\"backend\":\"mpi\""
        json shouldContain "\"operation\":\"allReduce\""
        json shouldContain "\"durationMicros\":null"
        json shouldContain "\"state\":\"Completed\""
    }

    test("concurrent starts get unique sequence numbers and the ring ends with the newest capacity of them") {
        val capacity = 16
        val rec = FlightRecorder(capacity)
        val threads = 8
        val perThread = 5_000
        val seen = ConcurrentHashMap.newKeySet<Long>()
        val go = CountDownLatch(1)
        val workers = (0 until threads).map {
            thread {
                go.await()
                repeat(perThread) {
                    val e = rec.start("op")
                    seen += e.sequence
                    e.complete()
                    if (it % 512 == 0) rec.snapshot() // dumps while others record must not fail
                }
            }
        }
        go.countDown()
        workers.forEach { it.join() }
        val total = threads.toLong() * perThread
        seen.size.toLong() shouldBe total
        rec.nextSequenceNumber shouldBe total + 1
        rec.snapshot().map { it.sequence } shouldContainExactly ((total - capacity + 1)..total).toList()
    }
})
