package dev.tpcomm.coroutines.local

import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.doubles.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain

/**
 * Issue 34: a training loop that forgets 1 MiB tensors on a local world of 2 ranks, in a child JVM
 * with -Xmx256m and a native memory budget of 1 GiB, stays within the budget plus 25% of RSS
 * (whole process, VmHWM): reaching the budget runs the garbage collector, whose cleaners give the
 * forgotten tensors back. Before the budget, the same loop reached 11 GiB.
 */
class ForgetfulLoopTest : FunSpec({
    test("1 MiB tensors forgotten 6,000 times per rank, an allReduce every 1,000, stay within a 1 GiB budget + 25% RSS") {
        val limitMib = 1024 * 1.25
        val (rc, out) = ChildJvm.run(
            ForgetfulLoopProgram::class.java.name,
            listOf("-Xmx256m", "-XX:+UseParallelGC", "--enable-native-access=ALL-UNNAMED", "-Dtpcomm.memory.budget=1g"),
            listOf("262144", "6000", "1000", limitMib.toString()),
        )
        out shouldContain "done rss_peak_mib"
        rc shouldBe 0
        Regex("rss_peak_mib ([0-9.]+)").find(out)!!.groupValues[1].toDouble() shouldBeLessThan limitMib
    }
})
