package dev.tpcomm.coroutines.local

import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import kotlinx.coroutines.runBlocking
import java.io.File

/**
 * Issue 34's host loop as a user writes it, run in a child JVM by [ForgetfulLoopTest]:
 * `runLocalWorld(2)`, each rank allocates `Tensor.zeros(Float32, ELEMENTS)` N times without closing
 * it, with one `allReduce` every EVERY tensors. Args: `ELEMENTS N EVERY LIMIT_MIB`. Exits 3 as soon
 * as VmRSS passes LIMIT_MIB (so a broken budget never takes the machine's memory); otherwise prints
 * `done rss_peak_mib <VmHWM> seconds <s>`.
 */
object ForgetfulLoopProgram {
    @JvmStatic
    fun main(args: Array<String>) {
        val elements = args[0].toInt()
        val n = args[1].toInt()
        val every = args[2].toInt()
        val limit = args[3].toDouble()
        val start = System.nanoTime()
        val sums = runBlocking {
            runLocalWorld(2) { comm ->
                var sum = 0.0
                for (i in 0 until n) {
                    val t = Tensor.zeros(DType.Float32, elements)
                    t.setDouble(0, 1.0)
                    if ((i + 1) % every == 0) sum += comm.allReduce(t).getDouble(0)
                    if (comm.rank == 0 && i % 16 == 0 && status("VmRSS") > limit) {
                        println("rss over limit: ${status("VmRSS")} MiB > $limit MiB after $i tensors")
                        System.out.flush()
                        Runtime.getRuntime().halt(3)
                    }
                }
                sum
            }
        }
        check(sums.all { it == 2.0 * (n / every) }) { "wrong sums $sums" }
        println("done rss_peak_mib ${status("VmHWM")} seconds ${(System.nanoTime() - start) / 1e9}")
    }

    private fun status(key: String): Double =
        File("/proc/self/status").readLines().first { it.startsWith("$key:") }
            .substringAfter(':').trim().removeSuffix("kB").trim().toDouble() / 1024
}
