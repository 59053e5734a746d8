package dev.tpcomm.coroutines.local

import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.doubles.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.io.File
import java.util.concurrent.TimeUnit

/**
 * Issue 34: a training loop that forgets 1 MiB tensors on a local world of 2 ranks, in a child JVM
 * with -Xmx256m and a native memory budget of 1 GiB, stays within the budget plus 25% of RSS
 * (whole process, VmHWM): reaching the budget runs the garbage collector, whose cleaners give the
 * forgotten tensors back. Before the budget, the same loop reached 11 GiB.
 */
class ForgetfulLoopTest : FunSpec({
    test("1 MiB tensors forgotten 6,000 times per rank, an allReduce every 1,000, stay within a 1 GiB budget + 25% RSS") {
        val limitMib = 1024 * 1.25
        val java = File(System.getProperty("java.home"), "bin/java").path
        val cp = System.getProperty("surefire.test.class.path") ?: System.getProperty("java.class.path")
        val log = File.createTempFile("tpcomm-forgetful-", ".log")
        try {
            val pb = ProcessBuilder(
                java, "-Xmx256m", "-XX:+UseParallelGC", "--enable-native-access=ALL-UNNAMED", "-Dtpcomm.memory.budget=1g",
                "-cp", cp, ForgetfulLoopProgram::class.java.name, "262144", "6000", "1000", limitMib.toString(),
            ).redirectErrorStream(true).redirectOutput(log)
            pb.environment().remove("TPCOMM_MEMORY_BUDGET")
            val p = pb.start()
            if (!p.waitFor(120, TimeUnit.SECONDS)) p.destroyForcibly().waitFor()
            val out = log.readText().takeLast(4000)
            println(out)
            out shouldContain "done rss_peak_mib"
            p.exitValue() shouldBe 0
            Regex("rss_peak_mib ([0-9.]+)").find(out)!!.groupValues[1].toDouble() shouldBeLessThan limitMib
        } finally {
            log.delete()
        }
    }
})
