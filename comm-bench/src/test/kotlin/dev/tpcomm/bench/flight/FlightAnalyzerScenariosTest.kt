package dev.tpcomm.bench.flight

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.LocalWorld
import dev.tpcomm.coroutines.dumpFlightRecorder
import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldStartWith
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.delay
import kotlinx.coroutines.runBlocking
import java.nio.file.Files
import java.nio.file.Path
import kotlin.io.path.deleteIfExists
import kotlin.random.Random
import kotlin.time.Duration.Companion.seconds

/**
 * Seeded scenarios run as real local worlds of 2-4 ranks (coroutine ranks on their own threads,
 * real deadlines, dumps written by the recorder into a directory): each breaks one rank at one
 * collective, and the analyzer must name that rank and that collective in its verdict.
 */
class FlightAnalyzerScenariosTest : FunSpec({
    /** What goes wrong. */
    val kinds = Scenario.Fault.entries

    val seeds = 0 until 60
    for (seed in seeds) {
        val s = Scenario.generate(seed, kinds[seed % kinds.size])
        test("seed $seed: $s") {
            val dir = Files.createTempDirectory("tpcomm-analyze-$seed")
            s.run(dir)
            val result = FlightAnalyzer().analyze(dir)
            println("seed $seed ($s):\n$result\n")
            withClue("the report:\n$result") {
                result.verdict shouldStartWith "verdict: "
                result.kind shouldBe s.expectedKind
                result.culprits shouldBe s.expectedCulprits
                result.sequence shouldBe s.expectedSequence
            }
        }
    }

    test("no dumps: the verdict says so; the table of a healthy job lists every rank") {
        FlightAnalyzer().analyze(Files.createTempDirectory("tpcomm-empty")).verdict shouldBe "verdict: no flight-recorder dumps found"
        val dir = Files.createTempDirectory("tpcomm-healthy")
        Scenario(seed = 0, world = 3, program = Scenario.program(Random(1), 4), fault = Scenario.Fault.None, culprit = 0, at = 1).run(dir)
        val r = FlightAnalyzer().analyze(dir)
        r.kind shouldBe FlightAnalyzer.Kind.Healthy
        r.table.lines().size shouldBe 4
    }
})

/**
 * One generated job: [world] ranks run [program] (collectives 1..n); [culprit] commits [fault] at
 * collective [at].
 */
data class Scenario(val seed: Int, val world: Int, val program: List<Op>, val fault: Fault, val culprit: Int, val at: Int) {
    enum class Fault { Skip, WrongRoot, WrongShape, WrongOp, SleepPastDeadline, Fails, Killed, Straggler, None }

    enum class Op { AllReduceSum, AllReduceMax, Broadcast, AllGather, Barrier }

    override fun toString(): String = "$fault by rank $culprit of $world at collective $at of ${program.size}"

    private val timeout = if (fault == Fault.Straggler || fault == Fault.None) 10.seconds else 1.seconds

    /** Ranks named by the verdict: on a two-rank disagreement neither side can be told wrong, so both are. */
    val expectedCulprits: List<Int>
        get() = when (fault) {
            Fault.None -> emptyList()
            Fault.Skip, Fault.WrongRoot, Fault.WrongShape, Fault.WrongOp -> if (world == 2) listOf(0, 1) else listOf(culprit)
            else -> listOf(culprit)
        }

    val expectedKind: FlightAnalyzer.Kind
        get() = when (fault) {
            Fault.Skip, Fault.WrongRoot, Fault.WrongShape, Fault.WrongOp -> FlightAnalyzer.Kind.Mismatch
            Fault.SleepPastDeadline, Fault.Fails -> FlightAnalyzer.Kind.NeverReached
            Fault.Killed -> FlightAnalyzer.Kind.MissingDump
            Fault.Straggler -> FlightAnalyzer.Kind.Straggler
            Fault.None -> FlightAnalyzer.Kind.Healthy
        }

    val expectedSequence: Long? get() = if (fault == Fault.None) null else at.toLong()

    /** Runs the job; every rank's dump ends up in [dir] (on failure by the recorder itself, else on demand). */
    fun run(dir: Path) {
        val config = CommConfig(worldSize = world, timeout = timeout, flightRecorderDir = dir.toString())
        LocalWorld(world, config).use { w ->
            runBlocking {
                (0 until world).map { r -> async(Dispatchers.Default) { runCatching { rank(w.communicator(r)) } } }.awaitAll()
            }
            if (fault == Fault.Straggler || fault == Fault.None) for (r in 0 until world) w.communicator(r).dumpFlightRecorder()
        }
        if (fault == Fault.Killed) FlightRecorderFiles.of(dir, "world$world", culprit).deleteIfExists()
    }

    private suspend fun rank(c: Communicator) {
        val me = c.rank == culprit
        for ((i, op) in program.withIndex()) {
            val n = i + 1
            if (me && n == at) {
                when (fault) {
                    Fault.Skip -> continue
                    Fault.SleepPastDeadline -> delay(timeout * 2)
                    // Longer than the start times' resolution (50 ms with the default recorder clock) and
                    // the analyzer's 20 ms threshold together: a shorter stall is, by design, not named.
                    Fault.Straggler -> delay(250)
                    Fault.Fails, Fault.Killed -> throw IllegalStateException("rank ${c.rank} fails before collective $n")
                    else -> {}
                }
            }
            val bad = me && n == at
            when (op) {
                Op.AllReduceSum -> c.allReduce(Tensor.zeros(dev.tpcomm.DType.Float32, if (bad && fault == Fault.WrongShape) 3 else 2), ReduceOp.Sum)
                Op.AllReduceMax -> c.allReduce(Tensor.zeros(dev.tpcomm.DType.Float32, if (bad && fault == Fault.WrongShape) 3 else 2), if (bad && fault == Fault.WrongOp) ReduceOp.Min else ReduceOp.Max)
                Op.Broadcast -> c.broadcast(Tensor.zeros(dev.tpcomm.DType.Float32, if (bad && fault == Fault.WrongShape) 3 else 2), root = if (bad && fault == Fault.WrongRoot) 1 else 0)
                Op.AllGather -> c.allGather(Tensor.zeros(dev.tpcomm.DType.Int32, if (bad && fault == Fault.WrongShape) 3 else 1), dim = 0)
                Op.Barrier -> c.barrier()
            }
        }
    }

    companion object {
        /** A program of [n] collectives where neighbours differ (so a skipped one shows as a disagreement). */
        fun program(random: Random, n: Int): List<Op> {
            val out = mutableListOf<Op>()
            while (out.size < n) {
                val op = Op.entries[random.nextInt(Op.entries.size - 1)] // no barrier: every fault applies to every op
                if (out.lastOrNull() != op) out += op
            }
            return out
        }

        fun generate(seed: Int, fault: Fault): Scenario {
            val random = Random(seed)
            val world = 2 + random.nextInt(3)
            val size = 4 + random.nextInt(5)
            val at = 2 + random.nextInt(size - 2) // not the last: a skipped one shows against the next one
            // The faulted collective is one the fault applies to; neighbours always differ.
            val forced = when (fault) {
                Fault.WrongRoot -> Op.Broadcast
                Fault.WrongOp -> Op.AllReduceMax
                else -> null
            }
            val program = mutableListOf<Op>()
            for (i in 0 until size) {
                val choices = Op.entries.filter { it != Op.Barrier && it != program.lastOrNull() && (forced == null || i != at - 2 || it != forced) }
                program += if (i == at - 1 && forced != null) forced else choices[random.nextInt(choices.size)]
            }
            return Scenario(seed, world, program, fault, random.nextInt(world), at)
        }
    }
}

/** Where the recorder writes a rank's dump. */
object FlightRecorderFiles {
    fun of(dir: Path, communicator: String, rank: Int): Path = dir.resolve("$communicator-rank$rank.json")
}
