package dev.tpcomm.bench.jmh

import java.lang.management.ManagementFactory

/**
 * The CPU time per 8-byte all-reduce of [RecorderOverheadHarness], measured on the thread that runs
 * the loop (`ThreadMXBean.getCurrentThreadCpuTime`), so that time the thread spends descheduled on
 * a shared machine does not count (wall time on this project's 2-core VM swings 2-4x under other
 * jobs; CPU time far less). Prints one line per sample: `sample <i> cpu_ns_per_op <x> wall_ns_per_op <y>`.
 * Arguments: backend (`local1` or `mpi`), samples, operations per sample, warm-up samples.
 * `scripts/jfr-overhead.sh` runs it in JVMs with and without the JFR events.
 */
public object RecorderOverheadMain {
    /** Entry point. */
    @JvmStatic
    public fun main(args: Array<String>) {
        val backend = args.getOrElse(0) { "local1" }
        val samples = args.getOrElse(1) { "30" }.toInt()
        val ops = args.getOrElse(2) { "200000" }.toInt()
        val warmup = args.getOrElse(3) { "10" }.toInt()
        val threads = ManagementFactory.getThreadMXBean()
        RecorderOverheadHarness(backend).use { h ->
            for (i in -warmup until samples) {
                val cpu = LongArray(1)
                val wall0 = System.nanoTime()
                h.allReduceTimed(ops) { c -> cpu[0] = c }
                val wall = System.nanoTime() - wall0
                if (i >= 0) println("sample $i cpu_ns_per_op ${"%.2f".format(cpu[0].toDouble() / ops)} wall_ns_per_op ${"%.2f".format(wall.toDouble() / ops)}")
            }
        }
        check(threads.isCurrentThreadCpuTimeSupported)
    }
}
