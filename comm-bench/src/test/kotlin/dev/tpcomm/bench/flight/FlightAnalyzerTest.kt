package dev.tpcomm.bench.flight

import dev.tpcomm.coroutines.FlightRecord
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.coroutines.FlightRecorderDump
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain

/**
 * The verdicts that local worlds cannot produce (a rank stuck in a collective the others completed,
 * as a native library can leave one; a collective every rank reached that failed), on dumps
 * written as a native backend would, and the choice among several communicators.
 */
class FlightAnalyzerTest : FunSpec({
    fun rec(c: Long, op: String = "allReduce", state: FlightRecorder.State = FlightRecorder.State.Completed, start: Long = c * 1000, outcome: FlightRecorder.Outcome? = null, error: String? = null) =
        FlightRecord(
            sequence = c, collectiveSequence = c, operation = op, dtype = "Float32", shape = listOf(2), bytes = 8, root = null, peer = null,
            tag = null, dim = null, reduceOp = "Sum", state = state,
            outcome = outcome ?: if (state == FlightRecorder.State.Completed) FlightRecorder.Outcome.Ok else null,
            queuedEpochMicros = start, startedEpochMicros = start, completedEpochMicros = null, durationMicros = null, error = error,
        )

    fun dump(rank: Int, entries: List<FlightRecord>, communicator: String = "world", world: Int = 3, resolution: Long = 0) = FlightRecorderDump(
        backend = "mpi", communicator = communicator, rank = rank, worldSize = world, reason = "shutdown", pid = 1, dumpedAtEpochMicros = 99_000_000,
        lastSequenceIssued = entries.size.toLong(), lastSequenceCompleted = 0, aborted = false, abortCause = null, entries = entries,
        clockResolutionMicros = resolution,
    )

    test("coarse start times: gaps their resolution explains name no straggler; a longer stall is named, discounted") {
        // Three processes whose watchdogs tick 50 ms apart at different moments: every call of rank 2
        // stamped 45 ms after the same call of rank 0, in a job where nobody waited.
        val skew = mapOf(0 to 0L, 1 to 20_000L, 2 to 45_000L)
        fun ranks(resolution: Long, stallAt: Long? = null) = (0..2).map { r ->
            dump(r, (1L..8).map { c -> rec(c, start = c * 1_000_000 + skew.getValue(r) + if (r == 1 && c == stallAt) 300_000L else 0L) }, resolution = resolution)
        }
        val healthy = FlightAnalyzer().analyze(ranks(50_000))
        healthy.kind shouldBe FlightAnalyzer.Kind.Healthy
        healthy.verdict shouldContain "start times accurate to 50 ms"
        // The same stamps read as exact times: rank 2 is the straggler (the reading without the resolution).
        FlightAnalyzer().analyze(ranks(0)).kind shouldBe FlightAnalyzer.Kind.Straggler
        // Rank 1 stalls 300 ms before collective 5: named, at that collective, with the discounted wait.
        val stall = FlightAnalyzer().analyze(ranks(50_000, stallAt = 5))
        stall.kind shouldBe FlightAnalyzer.Kind.Straggler
        stall.culprits shouldBe listOf(1)
        stall.sequence shouldBe 5L
        // Rank 0 started 320 ms earlier, rank 2 275 ms: less 50 ms each, 495 ms.
        stall.verdict shouldContain "making the others wait 495 ms in total"
    }

    test("a rank stuck inside a collective the others completed is named, with the collective") {
        val done = (1L..5).map { rec(it) }
        val stuck = (1L..4).map { rec(it) } + rec(5, state = FlightRecorder.State.Started)
        val r = FlightAnalyzer().analyze(listOf(dump(0, done), dump(1, stuck), dump(2, done)))
        r.kind shouldBe FlightAnalyzer.Kind.Stuck
        r.culprits shouldBe listOf(1)
        r.sequence shouldBe 5L
        r.verdict shouldContain "rank(s) 1 of world are stuck in collective 5"
    }

    test("a collective every rank reached that failed everywhere is reported with its error") {
        val dumps = (0..2).map { rank ->
            dump(rank, (1L..2).map { rec(it) } + rec(3, state = FlightRecorder.State.Failed, outcome = FlightRecorder.Outcome.Aborted, error = "MPI error 15"))
        }
        val r = FlightAnalyzer().analyze(dumps)
        r.kind shouldBe FlightAnalyzer.Kind.Failed
        r.sequence shouldBe 3L
        r.verdict shouldContain "MPI error 15"
    }

    test("of a healthy world and a split that hung, the split's culprit is named; ranks whose ring wrapped still count as done") {
        val world = (0..3).map { rank -> dump(rank, (300L..555).map { rec(it) }, world = 4) }
        val split = listOf(
            dump(0, listOf(rec(1), rec(2, state = FlightRecorder.State.Started)), communicator = "world.split7-color0", world = 2),
            dump(1, listOf(rec(1)), communicator = "world.split7-color0", world = 2),
        )
        val r = FlightAnalyzer().analyze(world + split)
        r.kind shouldBe FlightAnalyzer.Kind.NeverReached
        r.communicator shouldBe "world.split7-color0"
        r.culprits shouldBe listOf(1)
        r.sequence shouldBe 2L
        FlightAnalyzer().analyze(world).kind shouldBe FlightAnalyzer.Kind.Healthy
    }
})
