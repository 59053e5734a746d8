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

    fun dump(rank: Int, entries: List<FlightRecord>, communicator: String = "world", world: Int = 3) = FlightRecorderDump(
        backend = "mpi", communicator = communicator, rank = rank, worldSize = world, reason = "shutdown", pid = 1, dumpedAtEpochMicros = 99_000_000,
        lastSequenceIssued = entries.size.toLong(), lastSequenceCompleted = 0, aborted = false, abortCause = null, entries = entries,
    )

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
