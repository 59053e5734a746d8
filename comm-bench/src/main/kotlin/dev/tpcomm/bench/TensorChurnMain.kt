package dev.tpcomm.bench

import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import kotlinx.coroutines.runBlocking
import java.io.File
import java.lang.management.ManagementFactory

/**
 * Host tensor churn, the allocation pattern of a training loop (issue 21), one measurement per JVM:
 *
 * - `close BYTES N REPEATS`: `Tensor.zeros` + one write + `close()` of a BYTES-byte tensor, N times
 *   per repeat after a warm-up repeat; prints `repeat <i> ns_per_op <wall> cpu_ns_per_op <cpu>` per
 *   repeat (the CPU time of the looping thread: time descheduled on a shared machine does not count).
 * - `forget N`: N fresh 8-byte tensors written once and never closed (the garbage collector must
 *   give them back); prints `rss ...` lines (VmRSS from /proc/self/status) at the start, every
 *   tenth of the loop and at the end, then `done forget <n> seconds <s> rss_start_mib <a>
 *   rss_end_mib <b> rss_peak_mib <c>`.
 * - `allgather N`: on a local world of 2 ranks, N `allGather`s of a fresh 8-byte input per rank,
 *   whose input and fresh output are never closed; prints the same `rss` and `done` lines.
 *
 * `scripts/tensor-churn.sh` runs it in fresh `-Xmx256m` JVMs, alternating tpcomm's pooled allocator
 * and `-Dtpcomm.memory.pool=false` (one shared arena per tensor, the allocator before the pool).
 */
public object TensorChurnMain {
    /** Entry point; see the object's documentation. */
    @JvmStatic
    public fun main(args: Array<String>) {
        when (args.getOrNull(0)) {
            "close" -> closeLoop(args[1].toLong(), args[2].toLong(), args.getOrElse(3) { "5" }.toInt())
            "forget" -> forgetLoop(args[1].toLong())
            "allgather" -> allGatherLoop(args[1].toLong())
            else -> {
                System.err.println("usage: TensorChurnMain close BYTES N REPEATS | forget N | allgather N")
                kotlin.system.exitProcess(2)
            }
        }
    }

    private fun closeLoop(bytes: Long, n: Long, repeats: Int) {
        require(bytes % 8 == 0L && bytes / 8 <= Int.MAX_VALUE) { "BYTES must be a multiple of 8" }
        val elements = (bytes / 8).toInt()
        var sink = 0L
        val threads = ManagementFactory.getThreadMXBean()
        for (r in -1 until repeats) {
            val cpu0 = threads.currentThreadCpuTime
            val start = System.nanoTime()
            for (i in 0 until n) {
                val t = Tensor.zeros(DType.Int64, elements)
                t.setLong(0, i)
                sink += t.getLong(0)
                t.close()
            }
            val ns = (System.nanoTime() - start).toDouble() / n
            val cpuNs = (threads.currentThreadCpuTime - cpu0).toDouble() / n
            if (r >= 0) println("repeat $r ns_per_op ${"%.1f".format(ns)} cpu_ns_per_op ${"%.1f".format(cpuNs)}")
        }
        if (sink == 42L) println()
    }

    private fun forgetLoop(n: Long) {
        val rssStart = rssMib()
        var peak = rssStart
        println("rss at 0: ${"%.1f".format(rssStart)} MiB")
        val start = System.nanoTime()
        var sum = 0L
        val step = maxOf(1L, n / 10)
        for (i in 0 until n) {
            val t = Tensor.zeros(DType.Int64, 1)
            t.setLong(0, i)
            sum += t.getLong(0)
            if ((i + 1) % step == 0L) {
                val rss = rssMib()
                peak = maxOf(peak, rss)
                println("rss at ${i + 1}: ${"%.1f".format(rss)} MiB after ${"%.2f".format((System.nanoTime() - start) / 1e9)} s")
            }
        }
        val seconds = (System.nanoTime() - start) / 1e9
        check(sum == n * (n - 1) / 2) { "wrong sum" }
        val rssEnd = rssMib()
        println(
            "done forget $n seconds ${"%.2f".format(seconds)} rss_start_mib ${"%.1f".format(rssStart)} " +
                "rss_end_mib ${"%.1f".format(rssEnd)} rss_peak_mib ${"%.1f".format(maxOf(peak, rssEnd, hwmMib()))}",
        )
    }

    private fun allGatherLoop(n: Long) {
        val rssStart = rssMib()
        var peak = rssStart
        println("rss at 0: ${"%.1f".format(rssStart)} MiB")
        val start = System.nanoTime()
        val step = maxOf(1L, n / 10)
        val sums = runBlocking {
            runLocalWorld(2) { comm ->
                var sum = 0L
                for (i in 0 until n) {
                    val out = comm.allGather(Tensor.of(longArrayOf(i + comm.rank)))
                    sum += out.getLong(0) + out.getLong(1)
                    if (comm.rank == 0 && (i + 1) % step == 0L) {
                        val rss = rssMib()
                        peak = maxOf(peak, rss)
                        println("rss at ${i + 1}: ${"%.1f".format(rss)} MiB after ${"%.2f".format((System.nanoTime() - start) / 1e9)} s")
                    }
                }
                sum
            }
        }
        val seconds = (System.nanoTime() - start) / 1e9
        check(sums.all { it == n * (n - 1) + n }) { "wrong sums $sums" }
        val rssEnd = rssMib()
        println(
            "done allgather $n seconds ${"%.2f".format(seconds)} rss_start_mib ${"%.1f".format(rssStart)} " +
                "rss_end_mib ${"%.1f".format(rssEnd)} rss_peak_mib ${"%.1f".format(maxOf(peak, rssEnd, hwmMib()))}",
        )
    }

    private fun status(key: String): Double =
        File("/proc/self/status").readLines().firstOrNull { it.startsWith("$key:") }
            ?.substringAfter(':')?.trim()?.removeSuffix("kB")?.trim()?.toDouble()?.div(1024) ?: Double.NaN

    private fun rssMib(): Double = status("VmRSS")

    private fun hwmMib(): Double = status("VmHWM")
}
