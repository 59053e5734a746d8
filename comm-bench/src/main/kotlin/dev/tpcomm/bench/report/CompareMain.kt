@file:JvmName("CompareMain")

package dev.tpcomm.bench.report

import java.nio.file.Files
import java.nio.file.Path
import kotlin.system.exitProcess

/**
 * `CompareMain --out docs/benchmarks/comparison.md --plots docs/benchmarks --results a.csv,b.csv --repeats r1.csv,r2.csv
 * [--roofline raw.txt] [--env env.txt] [--reasons reasons.md]`: writes the comparison document
 * (used by `scripts/compare.sh`) and prints the targets and the headline table to stdout.
 */
public fun main(args: Array<String>) {
    val m = HashMap<String, String>()
    var i = 0
    while (i < args.size) {
        val k = args[i]
        if (!k.startsWith("--") || i + 1 >= args.size) {
            System.err.println("compare report: expected --name value pairs, got '$k'"); exitProcess(2)
        }
        m[k.removePrefix("--")] = args[i + 1]
        i += 2
    }
    val out = Path.of(m["out"] ?: "docs/benchmarks/comparison.md")
    val plots = Path.of(m["plots"] ?: "docs/benchmarks")
    fun paths(key: String) = m[key]?.split(',')?.filter { it.isNotBlank() }?.map { Path.of(it) } ?: emptyList()
    val env = m["env"]?.let { Path.of(it) }?.takeIf { Files.exists(it) }?.let { Files.readAllLines(it).filter { l -> l.isNotBlank() } } ?: emptyList()
    val reasons = m["reasons"]?.let { Path.of(it) }?.takeIf { Files.exists(it) }?.let { Files.readAllLines(it) } ?: emptyList()
    val report = CompareReport.load(paths("results"), paths("repeats"), m["roofline"]?.let { Path.of(it) }, env)
    val written = report.writePlots(plots)
    val base = out.toAbsolutePath().parent
    Files.createDirectories(base)
    val rel = written.map { base.relativize(it.first.toAbsolutePath()).toString() to it.second }
    Files.writeString(out, report.markdown(rel, reasons))
    println("targets:")
    for (t in report.targets()) println("  [${when (t.met) { true -> "met"; false -> "MISSED"; null -> "n/a" }}] ${t.name}: ${t.measured}")
    println()
    println(report.headline(4))
    System.err.println("wrote $out and ${written.size} plots in $plots")
}
