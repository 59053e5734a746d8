package dev.tpcomm.bench

import java.util.Locale

/**
 * One measured point: the median over repeats of the max-over-ranks mean time per iteration.
 *
 * @property wrong wrong elements found by the correctness check, summed over ranks; -1 when not checked.
 * @property repeatsUs every repeat's time in microseconds, in the order measured.
 * @property iterations timed iterations per repeat (K).
 * @property firstUs mean time of the point's first [BenchOptions.firstCalls] calls, before its
 * warm-up (max over ranks, microseconds); NaN when none were timed.
 */
public data class BenchResult(
    val impl: String,
    val op: BenchOp,
    val world: Int,
    val bytes: Long,
    val count: Long,
    val timeUs: Double,
    val algbwGBps: Double,
    val busbwGBps: Double,
    val wrong: Long,
    val iterations: Long,
    val repeatsUs: List<Double>,
    val firstUs: Double = Double.NaN,
) {
    /** The line in the common CSV format `impl,collective,world,bytes,time_us,algbw_GBps,busbw_GBps`. */
    public fun csvLine(): String = String.format(
        Locale.ROOT, "%s,%s,%d,%d,%.3f,%.4f,%.4f", impl, op.csvName, world, bytes, timeUs, algbwGBps, busbwGBps,
    )

    /** The line of the repeats file `impl,collective,world,bytes,K,t1_us,t2_us,...`. */
    public fun repeatsLine(): String =
        "$impl,${op.csvName},$world,$bytes,$iterations," + repeatsUs.joinToString(",") { String.format(Locale.ROOT, "%.3f", it) }

    public companion object {
        /** The CSV header shared with the peers' programs. */
        public const val CSV_HEADER: String = "impl,collective,world,bytes,time_us,algbw_GBps,busbw_GBps"

        /** The header of the repeats file for [n] repeats. */
        public fun repeatsHeader(n: Int): String = "impl,collective,world,bytes,K," + (1..n).joinToString(",") { "t${it}_us" }
    }
}
