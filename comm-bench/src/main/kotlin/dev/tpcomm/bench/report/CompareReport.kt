package dev.tpcomm.bench.report

import dev.tpcomm.bench.BusbwPlot
import dev.tpcomm.bench.CsvRow
import dev.tpcomm.bench.Sizes
import java.nio.file.Files
import java.nio.file.Path
import java.util.Locale
import kotlin.math.max

/**
 * Builds `docs/benchmarks/comparison.md` from one comparison session: the peers' CSVs (C MPI, mpi4py, torch
 * gloo, roofline) and tpcomm's, measured by `scripts/compare.sh` on the same sizes and world sizes.
 *
 * Pure function of its inputs apart from writing the plots; not thread-safe.
 *
 * @property rows every result row (peers' and tpcomm's), bytes per rank.
 * @property repeats per point, the repeat times in µs (`impl, collective, world, bytes` -> times).
 * @property roofline `allreduce4` time in µs by bytes (C, in-process 4-rank all-reduce, 2 threads).
 * @property environment lines describing the machine and the session (printed verbatim).
 */
public class CompareReport(
    private val rows: List<CsvRow>,
    private val repeats: Map<Key, List<Double>>,
    private val roofline: Map<Long, Double>,
    private val environment: List<String>,
) {
    /** Identifies one measured point. */
    public data class Key(val impl: String, val collective: String, val world: Int, val bytes: Long)

    /** One target of the issue, evaluated. */
    public data class Target(val name: String, val measured: String, val met: Boolean?, val note: String = "")

    private val byKey = rows.associateBy { Key(it.impl, it.collective, it.world, it.bytes) }
    private val worlds = rows.map { it.world }.distinct().sorted()
    private val sizes = rows.map { it.bytes }.distinct().sorted()
    private val collectives = listOf("allreduce", "allgather", "broadcast").filter { c -> rows.any { it.collective == c } }
    private val mpiImpls = rows.map { it.impl }.distinct().filter { it.startsWith("tpcomm_mpi_") }.sorted()
    private val tpImpls = listOf("tpcomm_local") + rows.map { it.impl }.distinct().filter { it.startsWith("tpcomm_") && it != "tpcomm_local" }.sorted()

    private fun t(impl: String, coll: String, w: Int, b: Long): Double? = byKey[Key(impl, coll, w, b)]?.timeUs
    private fun bus(impl: String, coll: String, w: Int, b: Long): Double? = byKey[Key(impl, coll, w, b)]?.busbwGBps

    /** The spread of a point's repeats, (max - min) / median, or null. */
    public fun spread(k: Key): Double? = repeats[k]?.takeIf { it.isNotEmpty() }?.let { ts ->
        val s = ts.sorted()
        val med = s[s.size / 2]
        if (med > 0) (s.last() - s.first()) / med else null
    }

    /** The targets of the issue, evaluated on this session's figures. */
    public fun targets(): List<Target> {
        val out = ArrayList<Target>()
        val local = "tpcomm_local"
        for ((bytes, limit) in listOf((64L shl 20) to 1.15, (1L shl 20) to 1.5)) {
            val ours = t(local, "allreduce", 4, bytes)
            val rl = roofline[bytes]
            out += if (ours != null && rl != null) {
                val r = ours / rl
                Target("local all-reduce, 4 ranks, ${Sizes.human(bytes)}: time / roofline allreduce4 <= $limit",
                    fmt("%.2fx (%s us vs %s us)", r, us(ours), us(rl)), r <= limit)
            } else Target("local all-reduce, 4 ranks, ${Sizes.human(bytes)} vs roofline", "not measured", null)
        }
        for (w in worlds) {
            val pts = sizes.filter { it >= 1024 && it <= 64L shl 20 }.mapNotNull { b ->
                val o = t(local, "allreduce", w, b); val c = t("c_mpi", "allreduce", w, b)
                if (o != null && c != null) Triple(b, o, c) else null
            }
            if (pts.isEmpty()) continue
            val worst = pts.maxBy { it.second / it.third }
            val slower = pts.filter { it.second >= it.third }.map { Sizes.human(it.first) }
            out += Target("local all-reduce faster than C MPI, $w ranks, 1 KiB..64 MiB",
                fmt("worst %.2fx of C at %s", worst.second / worst.third, Sizes.human(worst.first)) +
                    if (slower.isEmpty()) "" else "; not faster at ${slower.joinToString()}",
                slower.isEmpty())
        }
        for (w in worlds) {
            val pts = sizes.filter { it >= 65536 }.mapNotNull { b ->
                val o = bus(local, "allreduce", w, b); val g = bus("torch_gloo", "allreduce", w, b)
                if (o != null && g != null && g > 0) Triple(b, o, g) else null
            }
            if (pts.isEmpty()) continue
            val worst = pts.minBy { it.second / it.third }
            out += Target("local all-reduce busbw >= 5x torch gloo, $w ranks, 64 KiB and up",
                fmt("lowest %.1fx at %s", worst.second / worst.third, Sizes.human(worst.first)), pts.all { it.second >= 5 * it.third })
        }
        t(local, "allreduce", 4, 8)?.let { out += Target("local all-reduce of 8 bytes on 4 ranks < 2 us", fmt("%.2f us", it), it < 2.0) }
        for (impl in mpiImpls) for (w in worlds) {
            val big = ArrayList<Pair<String, Double>>()
            var small: Double? = null
            val vsPy = ArrayList<Pair<String, Double>>()
            for (coll in collectives) for (b in sizes) {
                val o = t(impl, coll, w, b) ?: continue
                t("c_mpi", coll, w, b)?.let { c ->
                    if (b >= 65536) big += "$coll ${Sizes.human(b)}" to o / c
                    if (b == 8L && coll == "allreduce") small = o / c
                }
                t("mpi4py", coll, w, b)?.let { p -> vsPy += "$coll ${Sizes.human(b)}" to o / p }
            }
            if (big.isNotEmpty()) {
                val worst = big.maxBy { it.second }
                out += Target("$impl within 1.05x of C MPI at 64 KiB and above, $w ranks",
                    fmt("worst %.2fx (%s); %d of %d points within", worst.second, worst.first, big.count { it.second <= 1.05 }, big.size),
                    big.all { it.second <= 1.05 })
            }
            small?.let { out += Target("$impl all-reduce 8 B within 1.5x of C MPI, $w ranks", fmt("%.2fx", it), it <= 1.5) }
            if (vsPy.isNotEmpty()) {
                val worst = vsPy.maxBy { it.second }
                out += Target("$impl faster than mpi4py at every size, $w ranks",
                    fmt("worst %.2fx of mpi4py (%s); %d of %d points faster", worst.second, worst.first, vsPy.count { it.second < 1 }, vsPy.size),
                    vsPy.all { it.second < 1 })
            }
        }
        return out
    }

    /** The markdown document; [plots] are the PNG files (relative to the document) to embed. */
    public fun markdown(plots: List<Pair<String, String>>, reasons: List<String>): String = buildString {
        appendLine("# Benchmarks")
        appendLine()
        appendLine("Generated by `scripts/compare.sh`: the peers of `../shared/bench/peers` (C with Open MPI, mpi4py, torch.distributed")
        appendLine("with gloo, the C roofline) and tpcomm (`scripts/bench.sh`: local backend, MPI backend) measured in one session, on")
        appendLine("the same sizes (bytes per rank) and world sizes, float32, SUM. Method everywhere: correctness check, warm-up,")
        appendLine("iteration count calibrated to about 0.25 s per repeat, barrier, mean per rank, max over ranks, median of 3")
        appendLine("repeats. busbw uses nccl-tests' factors (all-reduce 2(n-1)/n, all-gather (n-1)/n with algbw over n x bytes,")
        appendLine("broadcast 1). Ratios are time ratios (< 1: tpcomm is faster). Spread = (max - min) / median of the 3 repeats.")
        appendLine()
        appendLine("## How to reproduce")
        appendLine()
        appendLine("```")
        appendLine("scripts/compare.sh                       # this document: peers + tpcomm, worlds 2 and 4 (10-15 min)")
        appendLine("scripts/bench.sh --op all --world 4      # nccl-tests-style table for one configuration (--help: every option)")
        appendLine("scripts/bench.sh --backend mpi --world 4 --csv out.csv --plot out.png --compare peers.csv")
        appendLine("scripts/jmh.sh                           # JMH micro-benchmarks of the hot paths (scripts/jmh.sh -l lists them)")
        appendLine("scripts/demo.sh                          # the tensor-parallel training demo, with its time per step")
        appendLine("```")
        appendLine()
        appendLine("## Session")
        appendLine()
        for (e in environment) appendLine("- $e")
        appendLine()
        appendLine("## Targets")
        appendLine()
        appendLine("| target | measured | met |")
        appendLine("|---|---|---|")
        for (tg in targets()) appendLine("| ${tg.name} | ${tg.measured} | ${when (tg.met) { true -> "yes"; false -> "**no**"; null -> "-" }} |")
        appendLine()
        if (reasons.isNotEmpty()) {
            for (r in reasons) appendLine(r)
            appendLine()
        }
        appendLine("## Headline: all-reduce, float32, 4 ranks")
        appendLine()
        append(headline(4))
        appendLine()
        for (p in plots) {
            appendLine("![${p.second}](${p.first})")
            appendLine()
        }
        appendLine("## Tables")
        appendLine()
        for (coll in collectives) for (w in worlds) {
            appendLine("### $coll, $w ranks")
            appendLine()
            val impls = tpImpls
            val head = StringBuilder("| bytes/rank |")
            val sep = StringBuilder("|---|")
            for (i in impls) { head.append(" ${short(i)} us | ${short(i)} busbw | ${short(i)} spread |"); sep.append("---|---|---|") }
            head.append(" C MPI us | C busbw | mpi4py us | gloo us | gloo busbw |")
            sep.append("---|---|---|---|---|")
            for (i in impls) { head.append(" ${short(i)} / C | ${short(i)} / mpi4py |"); sep.append("---|---|") }
            if (coll == "allreduce" && w == 4) { head.append(" local / roofline |"); sep.append("---|") }
            appendLine(head); appendLine(sep)
            for (b in sizes) {
                val line = StringBuilder("| ${Sizes.human(b)} |")
                for (i in impls) {
                    line.append(" ${t(i, coll, w, b)?.let { us(it) } ?: "-"} | ${bus(i, coll, w, b)?.let { fmt("%.3f", it) } ?: "-"} | ${spread(Key(i, coll, w, b))?.let { fmt("%.0f%%", it * 100) } ?: "-"} |")
                }
                line.append(" ${t("c_mpi", coll, w, b)?.let { us(it) } ?: "-"} | ${bus("c_mpi", coll, w, b)?.let { fmt("%.3f", it) } ?: "-"} |")
                line.append(" ${t("mpi4py", coll, w, b)?.let { us(it) } ?: "-"} | ${t("torch_gloo", coll, w, b)?.let { us(it) } ?: "-"} | ${bus("torch_gloo", coll, w, b)?.let { fmt("%.3f", it) } ?: "-"} |")
                for (i in impls) line.append(" ${ratio(t(i, coll, w, b), t("c_mpi", coll, w, b))} | ${ratio(t(i, coll, w, b), t("mpi4py", coll, w, b))} |")
                if (coll == "allreduce" && w == 4) line.append(" ${ratio(t("tpcomm_local", coll, w, b), roofline[b])} |")
                appendLine(line)
            }
            appendLine()
        }
        if (roofline.isNotEmpty()) {
            appendLine("Roofline `allreduce4` (C, `gcc -O3 -march=native`, 2 threads, in-process 4-rank all-reduce): " +
                roofline.entries.sortedBy { it.key }.joinToString { "${Sizes.human(it.key)}: ${us(it.value)} us" } + ".")
            appendLine()
        }
    }

    /** The headline table (all-reduce, [world] ranks): tpcomm local and MPI against C MPI, mpi4py and gloo. */
    public fun headline(world: Int): String = buildString {
        val impls = tpImpls
        appendLine("| bytes/rank | " + impls.joinToString(" | ") { "${short(it)} us" } + " | C MPI us | mpi4py us | gloo us | " +
            impls.joinToString(" | ") { "${short(it)} / C" } + " | local busbw / gloo |")
        appendLine("|---|" + "---|".repeat(impls.size * 2 + 4))
        for (b in sizes) {
            val c = t("c_mpi", "allreduce", world, b)
            appendLine("| ${Sizes.human(b)} | " + impls.joinToString(" | ") { t(it, "allreduce", world, b)?.let { v -> us(v) } ?: "-" } +
                " | ${c?.let { us(it) } ?: "-"} | ${t("mpi4py", "allreduce", world, b)?.let { us(it) } ?: "-"} | ${t("torch_gloo", "allreduce", world, b)?.let { us(it) } ?: "-"} | " +
                impls.joinToString(" | ") { ratio(t(it, "allreduce", world, b), c) } +
                " | ${busRatio(bus("tpcomm_local", "allreduce", world, b), bus("torch_gloo", "allreduce", world, b))} |")
        }
    }

    /** Writes one busbw plot per collective and world into [dir]; returns (file name, caption) pairs. */
    public fun writePlots(dir: Path): List<Pair<Path, String>> {
        Files.createDirectories(dir)
        val out = ArrayList<Pair<Path, String>>()
        for (coll in collectives) for (w in worlds) {
            val series = BusbwPlot.seriesOf(rows.filter { it.collective == coll && it.world == w })
            if (series.isEmpty()) continue
            val f = dir.resolve("busbw_${coll}_n$w.png")
            BusbwPlot.write(f, "busbw, $coll, $w ranks, float32 (higher is better)", series)
            out += f to "busbw, $coll, $w ranks"
        }
        return out
    }

    public companion object {
        /** Reads the peers' and tpcomm's files. Missing optional files give empty parts. */
        public fun load(results: List<Path>, repeatFiles: List<Path>, rooflineLines: Path?, environment: List<String>): CompareReport {
            val rows = results.filter { Files.exists(it) }.flatMap { CsvRow.read(it) }
            val reps = HashMap<Key, List<Double>>()
            for (f in repeatFiles.filter { Files.exists(it) }) {
                val lines = Files.readAllLines(f).filter { it.isNotBlank() && !it.startsWith("#") }
                for (line in lines.drop(1)) {
                    val p = line.split(',')
                    if (p.size < 6) continue
                    val key = Key(p[0], p[1], p[2].toIntOrNull() ?: continue, p[3].toLongOrNull() ?: continue)
                    reps[key] = p.drop(5).mapNotNull { it.trim().toDoubleOrNull() }
                }
            }
            val roof = HashMap<Long, Double>()
            if (rooflineLines != null && Files.exists(rooflineLines)) {
                // allreduce4,2,BYTES,TIME_US,...
                for (line in Files.readAllLines(rooflineLines)) {
                    val p = line.split(',')
                    if (p.size >= 4 && p[0] == "allreduce4") roof[p[2].toLong()] = p[3].toDouble()
                }
            }
            return CompareReport(rows, reps, roof, environment)
        }

        internal fun fmt(p: String, vararg a: Any?): String = String.format(Locale.ROOT, p, *a)

        internal fun us(v: Double): String = when {
            v < 10 -> fmt("%.2f", v)
            v < 1000 -> fmt("%.1f", v)
            else -> fmt("%,.0f", v)
        }

        private fun ratio(a: Double?, b: Double?): String = if (a == null || b == null || b <= 0) "-" else {
            val r = a / b
            if (r >= 10) fmt("%.0f", r) else fmt("%.2f", r)
        }

        private fun busRatio(a: Double?, b: Double?): String = if (a == null || b == null || b <= 0) "-" else fmt("%.0f", max(a / b, 0.0))

        private fun short(impl: String): String = impl.removePrefix("tpcomm_").replace("mpi_", "mpi-")
    }
}
