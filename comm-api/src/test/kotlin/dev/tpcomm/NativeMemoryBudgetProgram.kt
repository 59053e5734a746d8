package dev.tpcomm

import java.io.File

/**
 * Allocation patterns run in a child JVM by [NativeMemoryBudgetTest] (a small heap, a budget set
 * with `-Dtpcomm.memory.budget` or `TPCOMM_MEMORY_BUDGET`):
 *
 * - `hold BYTES N`: keeps N tensors of BYTES bytes reachable, never closed; prints `caught <class>`
 *   and `message <text>` when an allocation throws, then `held <count>`.
 * - `forget BYTES N LIMIT_MIB`: allocates N tensors of BYTES bytes, writes one element and forgets
 *   them; exits 3 (`rss over limit`) as soon as VmRSS passes LIMIT_MIB, so a broken budget never
 *   takes the machine's memory; prints `done forget rss_start_mib <a> rss_peak_mib <b>`.
 */
object NativeMemoryBudgetProgram {
    @JvmStatic
    fun main(args: Array<String>) {
        val bytes = args[1].toInt()
        val n = args[2].toInt()
        when (args[0]) {
            "hold" -> {
                val held = ArrayList<Tensor>()
                try {
                    repeat(n) { held += Tensor.zeros(DType.UInt8, bytes) }
                } catch (e: Throwable) {
                    println("caught ${e.javaClass.name}")
                    println("message ${e.message}")
                }
                println("held ${held.size}")
            }
            "forget" -> {
                val limit = args[3].toDouble()
                val start = rssMib()
                for (i in 0 until n) {
                    val t = Tensor.zeros(DType.UInt8, bytes)
                    t.setLong(0, 1)
                    if (i % 16 == 0 && rssMib() > limit) {
                        println("rss over limit: ${rssMib()} MiB > $limit MiB after $i tensors")
                        kotlin.system.exitProcess(3)
                    }
                }
                println("done forget rss_start_mib $start rss_peak_mib ${maxOf(rssMib(), status("VmHWM"))}")
            }
        }
    }

    private fun status(key: String): Double =
        File("/proc/self/status").readLines().first { it.startsWith("$key:") }
            .substringAfter(':').trim().removeSuffix("kB").trim().toDouble() / 1024

    private fun rssMib(): Double = status("VmRSS")
}
