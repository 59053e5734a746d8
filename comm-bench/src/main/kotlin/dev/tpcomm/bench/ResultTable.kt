package dev.tpcomm.bench

import dev.tpcomm.DType
import java.io.PrintStream
import java.util.Locale

/** Prints results as nccl-tests does: one header per collective, one row per size, a footer. */
public class ResultTable(private val out: PrintStream, private val options: BenchOptions) {
    private val all = ArrayList<BenchResult>()
    private var current: BenchOp? = null

    /** Prints the header of [op]'s table. */
    public fun header(op: BenchOp, world: Int) {
        current = op
        out.println("#")
        out.println("# tpcomm comm-bench: ${op.cliName}, backend ${options.backend}${if (options.backend == "mpi") " (${options.mpi})" else ""}, " +
            "world $world, dtype ${dtypeName(options.dtype)}, impl ${options.implLabel}, dispatcher ${options.dispatcher}")
        out.println("# method: check, warm-up, calibrated iterations (~${fmt("%.2f", options.timeBudgetSeconds)} s per repeat, one untimed" +
            (options.iters?.let { ", fixed $it" } ?: "") + "), barrier, mean per rank, max over ranks, median of ${options.repeats} repeats" +
            (if (options.firstCalls > 0) "; first: mean of the first ${options.firstCalls} calls at the size (fewer past ${fmt("%.2f", options.timeBudgetSeconds)} s), before its warm-up" else ""))
        out.println("#")
        out.println(fmt("# %10s  %12s  %8s  %6s  %6s  %10s  %8s  %8s  %6s  %10s", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "first"))
        out.println(fmt("# %10s  %12s  %8s  %6s  %6s  %10s  %8s  %8s  %6s  %10s", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)"))
        out.flush()
    }

    /** Prints one row. */
    public fun row(r: BenchResult) {
        if (current != r.op) header(r.op, r.world)
        all += r
        val redop = if (r.op.reduces) options.redop.name.lowercase() else "none"
        val root = if (r.op.rooted) options.root.toString() else "-1"
        val wrong = if (r.wrong < 0) "N/A" else r.wrong.toString()
        out.println(fmt("  %10d  %12d  %8s  %6s  %6s  %10s  %8.2f  %8.2f  %6s  %10s",
            r.bytes, r.count, dtypeName(options.dtype), redop, root, time(r.timeUs), r.algbwGBps, r.busbwGBps, wrong,
            if (r.firstUs.isNaN()) "-" else time(r.firstUs)))
        out.flush()
    }

    /** Prints the footer: wrong values and the average bus bandwidth over every row printed. */
    public fun footer() {
        val wrong = all.filter { it.wrong > 0 }.sumOf { it.wrong }
        out.println(fmt("# Out of bounds values : %d %s", wrong, if (wrong == 0L) "OK" else "FAILED"))
        if (all.isNotEmpty()) out.println(fmt("# Avg bus bandwidth    : %.4f", all.map { it.busbwGBps }.average()))
        out.println("#")
        out.flush()
    }

    private fun time(us: Double): String = when {
        us < 10 -> fmt("%.3f", us)
        us < 100_000 -> fmt("%.2f", us)
        else -> fmt("%.0f", us)
    }

    public companion object {
        /** nccl-tests' name of [dtype]. */
        public fun dtypeName(dtype: DType): String = when (dtype) {
            DType.Float32 -> "float"
            DType.Float64 -> "double"
            DType.Float16 -> "half"
            DType.BFloat16 -> "bfloat16"
            DType.Int8 -> "int8"
            DType.UInt8 -> "uint8"
            DType.Int32 -> "int32"
            DType.Int64 -> "int64"
            DType.UInt32 -> "uint32"
            DType.UInt64 -> "uint64"
            DType.Float8E4M3 -> "f8e4m3"
            DType.Float8E5M2 -> "f8e5m2"
            DType.Int16 -> "int16"
            DType.Bool -> "bool"
        }

        internal fun fmt(pattern: String, vararg args: Any?): String = String.format(Locale.ROOT, pattern, *args)
    }
}
