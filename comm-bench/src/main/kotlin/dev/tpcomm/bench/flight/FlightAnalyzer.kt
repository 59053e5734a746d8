package dev.tpcomm.bench.flight

import dev.tpcomm.coroutines.FlightRecord
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.coroutines.FlightRecorderDump
import java.nio.file.Files
import java.nio.file.Path
import kotlin.io.path.isRegularFile
import kotlin.io.path.name
import kotlin.io.path.readText

/**
 * Joins the flight-recorder dumps of every rank of a job (as PyTorch's `fr_trace.py` does for its
 * recorder) and names what went wrong and who did it, in this order of precedence, at the first
 * collective that not every rank completed (collective sequence N):
 *
 * 1. [Kind.Mismatch]: ranks disagree on the operation, dtype, shape, root, reduce op or dim at N;
 *    the culprits are the ranks outside the largest agreeing group (both sides on a tie), and a
 *    culprit whose call at N is what the others call at N+1 skipped N.
 * 2. [Kind.MissingDump]: ranks that left no dump while others waited at N (killed or crashed).
 * 3. [Kind.NeverReached]: ranks that never issued N, or issued it only after the others had
 *    timed out or aborted (a rank that slept or failed outside any call); the verdict says what
 *    each did last.
 * 4. [Kind.Stuck]: ranks still inside N (or timed out in it) when others completed it.
 * 5. [Kind.Failed]: every rank reached N and it failed with no rank to blame (e.g. a data error).
 * 6. [Kind.Straggler]: nothing failed; the rank whose late arrival made the others wait longest
 *    over the recent collectives (the first collective, whose arrival times measure process
 *    start-up, left out), with the collective where it cost most. Start times are as precise as
 *    the backend's recorder clock, which each dump states (`clockResolutionMicros`: 50 ms on MPI
 *    without profiling and in-process without `local.timing`, where the start is the watchdog's
 *    latest scan): a rank is counted as waiting only for the part of a gap its own start time's
 *    resolution cannot explain, so ranks of a healthy job whose clocks tick at different moments
 *    are not called stragglers; a straggler is named once it made the others wait longer than that.
 * 7. [Kind.Healthy]: nothing failed and no rank made others wait more than [stragglerMinMicros].
 *
 * Dumps of several communicators (a world and its splits) are analysed per communicator; the
 * verdict is the one of the communicator that failed first, or the worst straggler.
 */
public class FlightAnalyzer(
    /** Total waiting a rank must cause before it is called a straggler. */
    private val stragglerMinMicros: Long = 20_000,
    /** How many of the most recent collectives the straggler analysis looks at. */
    private val window: Int = 64,
) {
    /** What the verdict is about. */
    public enum class Kind { Mismatch, MissingDump, NeverReached, Stuck, Failed, Straggler, Healthy, NoDumps }

    /** The analysis of one job: [verdict] is the first line printed, [table] the evidence. */
    public data class Result(
        val kind: Kind,
        val communicator: String?,
        val culprits: List<Int>,
        val sequence: Long?,
        val verdict: String,
        val table: String,
    ) {
        /** The report: the verdict line, then the table. */
        override fun toString(): String = "$verdict\n$table"
    }

    /** Reads every `*.json` dump under [dir] (ignoring files of another schema) and analyses them. */
    public fun analyze(dir: Path): Result {
        val dumps = Files.list(dir).use { s -> s.filter { it.isRegularFile() && it.name.endsWith(".json") }.toList() }.sorted().mapNotNull {
            runCatching { FlightRecorder.parseDump(it.readText()) }.getOrNull()
        }
        return analyze(dumps)
    }

    /** Analyses [dumps] of one job. */
    public fun analyze(dumps: List<FlightRecorderDump>): Result {
        if (dumps.isEmpty()) return Result(Kind.NoDumps, null, emptyList(), null, "verdict: no flight-recorder dumps found", "")
        val results = dumps.groupBy { it.communicator }.map { (id, ds) -> analyzeCommunicator(id, ds) }
        val failing = results.filter { it.first.kind != Kind.Straggler && it.first.kind != Kind.Healthy }
        if (failing.isNotEmpty()) return failing.minBy { it.second }.first
        return results.maxBy { it.third }.first
    }

    /** One rank's collectives by collective sequence. */
    private class RankView(val dump: FlightRecorderDump) {
        val rank = dump.rank
        val byCollective: Map<Long, FlightRecord> = dump.entries.filter { it.collectiveSequence != null }.associateBy { it.collectiveSequence!! }
        val maxIssued: Long = byCollective.keys.maxOrNull() ?: 0L
        val minKept: Long = byCollective.keys.minOrNull() ?: 1L
        val lastCompleted: Long = byCollective.values.filter { it.state == FlightRecorder.State.Completed }.maxOfOrNull { it.collectiveSequence!! } ?: 0L
        fun completed(n: Long) = byCollective[n]?.state == FlightRecorder.State.Completed || (n < minKept && n <= maxIssued)
    }

    /** Returns the result, the time of the first failure (for ordering), and the straggler's wait. */
    private fun analyzeCommunicator(id: String, dumps: List<FlightRecorderDump>): Triple<Result, Long, Long> {
        val worldSize = dumps.maxOf { it.worldSize }
        val views = dumps.groupBy { it.rank }.mapValues { (_, ds) -> RankView(ds.maxBy { it.dumpedAtEpochMicros }) }.toSortedMap()
        val missing = (0 until worldSize).filter { it !in views }
        val firstFailure = views.values.flatMap { v -> v.dump.entries.filter { it.state == FlightRecorder.State.Failed } }
            .minOfOrNull { it.completedEpochMicros ?: it.startedEpochMicros } ?: Long.MAX_VALUE

        // N: the first collective that not every present rank completed.
        val maxAll = views.values.maxOf { it.maxIssued }
        val n = (1..maxAll).firstOrNull { c -> views.values.any { !it.completed(c) } }
            ?: if (missing.isNotEmpty() && maxAll > 0) maxAll else null

        if (n == null) {
            val (res, wait) = straggler(id, views, worldSize)
            return Triple(res, Long.MAX_VALUE, wait)
        }

        val atN = views.mapValues { it.value.byCollective[n] }
        val issued = atN.filterValues { it != null }.mapValues { it.value!! }
        val reference = issued.values.filter { it.state == FlightRecorder.State.Completed || it.outcome != FlightRecorder.Outcome.Aborted }
        // The moment the others gave up at N: the earliest timeout, mismatch or cancellation among those
        // who waited (without completion times: the last of their arrivals). A call recorded as aborted
        // that started after it came too late (the communicator was already aborted).
        val givers = issued.values.filter { it.state == FlightRecorder.State.Failed && it.outcome != FlightRecorder.Outcome.Aborted }
        val gaveUp = givers.mapNotNull { it.completedEpochMicros }.minOrNull() ?: givers.maxOfOrNull { it.startedEpochMicros } ?: Long.MAX_VALUE
        val table = table(views, missing, n, issued)

        fun result(kind: Kind, culprits: List<Int>, text: String) =
            Triple(Result(kind, id, culprits, n, "verdict: $text", table), firstFailure, 0L)

        // 1. Disagreement at N among the ranks that issued it in time.
        val inTime = issued.filterValues { !(it.outcome == FlightRecorder.Outcome.Aborted && it.startedEpochMicros > gaveUp) }
        val groups = inTime.entries.groupBy({ signature(it.value) }, { it.key })
        if (groups.size > 1) {
            val largest = groups.values.maxOf { it.size }
            val majority = groups.entries.filter { it.value.size == largest }
            val culprits = if (majority.size == 1) groups.entries.filter { it != majority[0] }.flatMap { it.value }.sorted() else inTime.keys.sorted()
            val majorityRecord = if (majority.size == 1) inTime.getValue(majority[0].value.first()) else null
            val fields = culprits.flatMap { r -> diffFields(inTime.getValue(r), majorityRecord ?: inTime.getValue(inTime.keys.first { it != r })) }.distinct()
            val describeCulprits = culprits.joinToString("; ") { r -> "rank $r called ${describe(inTime.getValue(r), withSequence = false)}" }
            val skipped = culprits.filter { r ->
                val next = majority.singleOrNull()?.value?.firstNotNullOfOrNull { views.getValue(it).byCollective[n + 1] }
                next != null && signature(next) == signature(inTime.getValue(r))
            }
            val others = if (majorityRecord != null) " where rank(s) ${majority[0].value.sorted().joinToString(",")} called ${describe(majorityRecord, withSequence = false)}" else ""
            val skipText = if (skipped.isNotEmpty()) "; rank(s) ${skipped.joinToString(",")} skipped collective $n (their call is the others' collective ${n + 1})" else ""
            return result(
                Kind.Mismatch, culprits,
                "ranks disagree on ${fields.joinToString("/")} at collective $n of $id: $describeCulprits$others$skipText",
            )
        }

        val op = (reference.firstOrNull() ?: issued.values.firstOrNull())?.let { describe(it, withSequence = false) } ?: "?"
        val waiting = inTime.keys.filter { inTime.getValue(it).state != FlightRecorder.State.Completed }.sorted()

        // 2. Ranks that left no dump.
        if (missing.isNotEmpty()) {
            return result(
                Kind.MissingDump, missing,
                "rank(s) ${missing.joinToString(",")} of $id left no flight-recorder dump (killed or crashed?) while rank(s) " +
                    "${waiting.ifEmpty { views.keys.toList() }.joinToString(",")} waited in collective $n ($op)",
            )
        }

        // 3. Ranks that never issued N, or only after the others gave up.
        val absent = views.keys.filter { it !in inTime }.sorted()
        if (absent.isNotEmpty() && absent.size < views.size) {
            val what = absent.joinToString("; ") { r ->
                val late = issued[r]
                val v = views.getValue(r)
                val before = v.dump.entries.lastOrNull { late == null || it.sequence < late.sequence }
                val last = before?.let { "its last operation before was ${describe(it)} (${stateText(it)})" } ?: "it recorded nothing before"
                if (late != null) {
                    val wait = (late.startedEpochMicros - (inTime.values.minOfOrNull { it.startedEpochMicros } ?: late.startedEpochMicros)) / 1000
                    "rank $r reached it only $wait ms after the others arrived, when they had given up; $last"
                } else {
                    "rank $r never issued it; $last"
                }
            }
            return result(
                Kind.NeverReached, absent,
                "rank(s) ${absent.joinToString(",")} of $id never reached collective $n ($op) in time while rank(s) " +
                    "${inTime.keys.sorted().joinToString(",")} waited in it: $what",
            )
        }

        // 4. Ranks inside N that others completed.
        val done = inTime.filterValues { it.state == FlightRecorder.State.Completed }.keys
        if (done.isNotEmpty() && waiting.isNotEmpty()) {
            val how = waiting.joinToString("; ") { r -> "rank $r ${stateText(inTime.getValue(r))}" }
            return result(
                Kind.Stuck, waiting,
                "rank(s) ${waiting.joinToString(",")} of $id are stuck in collective $n ($op) that rank(s) ${done.sorted().joinToString(",")} completed: $how",
            )
        }

        // 5. Everyone reached N and it failed.
        val errors = inTime.values.mapNotNull { it.error }.distinct()
        return result(
            Kind.Failed, waiting,
            "collective $n ($op) of $id failed on rank(s) ${waiting.joinToString(",")} although every rank reached it: ${errors.firstOrNull() ?: "no error recorded"}",
        )
    }

    private fun straggler(id: String, views: Map<Int, RankView>, worldSize: Int): Pair<Result, Long> {
        // Arrival at the first collective measures how long each process took to start, not a straggler.
        val common = views.values.map { it.byCollective.keys }.reduce { a, b -> a intersect b }.filter { it > 1 }.sorted().takeLast(window)
        val caused = LongArray(worldSize)
        val lastCount = IntArray(worldSize)
        var worst = 0L; var worstSeq = 0L; var worstRank = -1
        for (c in common) {
            val starts = views.mapValues { it.value.byCollective.getValue(c).startedEpochMicros }
            val (last, lastStart) = starts.maxBy { it.value }
            // What rank r surely waited: its start may lie up to its clock's resolution before its arrival.
            val wait = starts.entries.sumOf { (r, start) -> maxOf(0L, lastStart - start - views.getValue(r).dump.clockResolutionMicros) }
            caused[last] += wait
            if (wait > 0) lastCount[last]++
            if (wait > worst) { worst = wait; worstSeq = c; worstRank = last }
        }
        val r = caused.indices.maxByOrNull { caused[it] } ?: 0
        val total = if (caused.isEmpty()) 0L else caused[r]
        val table = table(views, emptyList(), worstSeq.takeIf { it > 0 }, views.mapValues { it.value.byCollective[worstSeq] }.filterValues { it != null }.mapValues { it.value!! })
        val n = common.size
        if (total < stragglerMinMicros || common.isEmpty()) {
            return Result(
                Kind.Healthy, id, emptyList(), null,
                "verdict: healthy: all ${views.size} ranks of $id completed every recorded collective (${common.firstOrNull() ?: 0}..${common.lastOrNull() ?: 0}); " +
                    "no rank made the others wait more than ${total / 1000} ms in total" + resolutionNote(views),
                table,
            ) to total
        }
        val seq = if (worstRank == r) worstSeq else common.filter { c -> views.getValue(r).byCollective.getValue(c).startedEpochMicros == views.values.maxOf { it.byCollective.getValue(c).startedEpochMicros } }.lastOrNull() ?: worstSeq
        return Result(
            Kind.Straggler, id, listOf(r), seq,
            "verdict: no failure; straggler: rank $r of $id arrived last at ${lastCount[r]} of the last $n collectives, making the others wait " +
                "${total / 1000} ms in total${resolutionNote(views)}; worst at collective $seq (${describe(views.getValue(r).byCollective.getValue(seq), withSequence = false)})",
            table,
        ) to total
    }

    /** Where start times are coarse, how coarse (the waits above discount it). */
    private fun resolutionNote(views: Map<Int, RankView>): String {
        val coarsest = views.values.maxOf { it.dump.clockResolutionMicros }
        return if (coarsest > 0) " (start times accurate to ${coarsest / 1000} ms, discounted)" else ""
    }

    private fun table(views: Map<Int, RankView>, missing: List<Int>, n: Long?, atN: Map<Int, FlightRecord>): String {
        val t0 = atN.values.minOfOrNull { it.startedEpochMicros }
        val rows = mutableListOf(listOf("rank", "dump", "issued", "completed", "at collective ${n ?: "-"}", "arrived", "last operation"))
        for ((r, v) in views) {
            val rec = atN[r]
            val last = v.dump.entries.lastOrNull()
            rows += listOf(
                "$r", v.dump.reason, "${v.maxIssued}", "${v.lastCompleted}",
                rec?.let { "${it.operation} ${stateText(it)}" } ?: "not issued",
                if (rec != null && t0 != null) "+${(rec.startedEpochMicros - t0) / 1000} ms" else "-",
                last?.let { "${describe(it)} ${stateText(it)}" } ?: "-",
            )
        }
        for (r in missing) rows += listOf("$r", "none", "-", "-", "-", "-", "-")
        val widths = rows.first().indices.map { c -> rows.maxOf { it[c].length } }
        return rows.joinToString("\n") { row -> row.mapIndexed { c, s -> if (c == row.lastIndex) s else s.padEnd(widths[c]) }.joinToString("  ").trimEnd() }
    }

    private fun signature(r: FlightRecord) = listOf(r.operation, r.dtype, r.shape, r.root, r.reduceOp, r.dim)

    private fun diffFields(a: FlightRecord, b: FlightRecord): List<String> = buildList {
        if (a.operation != b.operation) add("operation")
        if (a.dtype != b.dtype) add("dtype")
        if (a.shape != b.shape) add("shape")
        if (a.root != b.root) add("root")
        if (a.reduceOp != b.reduceOp) add("reduce op")
        if (a.dim != b.dim) add("dim")
    }

    private fun stateText(r: FlightRecord): String = when (r.state) {
        FlightRecorder.State.Completed -> "completed"
        FlightRecorder.State.Failed -> "failed: ${r.outcome?.name?.lowercase()}"
        FlightRecorder.State.Started -> "in flight for ${(r.durationMicros ?: 0) / 1000} ms"
        FlightRecorder.State.Queued -> "queued"
    }

    public companion object {
        /** `seq 5 allReduce Float32[2] op=Sum`-style text of a record. */
        public fun describe(r: FlightRecord, withSequence: Boolean = true): String = buildString {
            append(r.operation)
            r.dtype?.let { append(' ').append(it) }
            r.shape?.let { append(it.joinToString(",", "[", "]")) }
            r.root?.let { append(" root=").append(it) }
            r.peer?.let { append(if (r.operation == "send") " dst=" else " src=").append(it) }
            r.tag?.let { append(" tag=").append(it) }
            r.reduceOp?.let { append(" op=").append(it) }
            r.dim?.let { append(" dim=").append(it) }
            if (withSequence) r.collectiveSequence?.let { append(" (collective ").append(it).append(')') } ?: append(" (seq ").append(r.sequence).append(')')
        }
    }
}
