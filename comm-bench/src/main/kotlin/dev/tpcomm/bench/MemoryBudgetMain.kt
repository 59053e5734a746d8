package dev.tpcomm.bench

import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import kotlinx.coroutines.runBlocking
import java.io.File
import java.lang.management.ManagementFactory

/**
 * The host loops of issue 34 (native memory budget), one measurement per JVM:
 *
 * `loop BYTES N EVERY forget|close`: on `runLocalWorld(2)`, each rank allocates
 * `Tensor.zeros(Float32, BYTES / 4)` N times, writes one element, and forgets it or closes it;
 * one `allReduce` every EVERY tensors (on the tensor of that step). Prints
 * `done loop bytes <b> n <n> mode <m> seconds <s> cpu_seconds <c> rss_start_mib <a> rss_peak_mib <VmHWM>`
 * (cpu_seconds: the whole process's CPU time, GC and cleaner threads included, which time spent
 * waiting for a core on a shared machine does not inflate).
 *
 * `scripts/memory-budget-bench.sh` runs it in fresh `-Xmx256m` JVMs with `-Dtpcomm.memory.budget=1g`,
 * beside `TensorChurnMain close` for allocate+close of a small and of a 64 MiB tensor.
 */
public object MemoryBudgetMain {
    /** Entry point; see the object's documentation. */
    @JvmStatic
    public fun main(args: Array<String>) {
        if (args.getOrNull(0) != "loop" || args.size != 5 || args[4] !in setOf("forget", "close")) {
            System.err.println("usage: MemoryBudgetMain loop BYTES N EVERY forget|close")
            kotlin.system.exitProcess(2)
        }
        val bytes = args[1].toInt()
        val n = args[2].toInt()
        val every = args[3].toInt()
        val close = args[4] == "close"
        require(bytes % 4 == 0 && bytes > 0) { "BYTES must be a positive multiple of 4" }
        val rssStart = status("VmRSS")
        val os = ManagementFactory.getOperatingSystemMXBean() as com.sun.management.OperatingSystemMXBean
        val cpu0 = os.processCpuTime
        val start = System.nanoTime()
        val sums = runBlocking {
            runLocalWorld(2) { comm ->
                var sum = 0.0
                for (i in 0 until n) {
                    val t = Tensor.zeros(DType.Float32, bytes / 4)
                    t.setDouble(0, 1.0)
                    if ((i + 1) % every == 0) sum += comm.allReduce(t).getDouble(0)
                    if (close) t.close()
                }
                sum
            }
        }
        val seconds = (System.nanoTime() - start) / 1e9
        val cpuSeconds = (os.processCpuTime - cpu0) / 1e9
        check(sums.all { it == 2.0 * (n / every) }) { "wrong sums $sums" }
        println(
            "done loop bytes $bytes n $n mode ${args[4]} seconds ${"%.2f".format(seconds)} cpu_seconds ${"%.2f".format(cpuSeconds)} " +
                "rss_start_mib ${"%.1f".format(rssStart)} rss_peak_mib ${"%.1f".format(status("VmHWM"))}",
        )
    }

    private fun status(key: String): Double =
        File("/proc/self/status").readLines().firstOrNull { it.startsWith("$key:") }
            ?.substringAfter(':')?.trim()?.removeSuffix("kB")?.trim()?.toDouble()?.div(1024) ?: Double.NaN
}
