package dev.tpcomm

import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.doubles.shouldBeLessThan
import io.kotest.matchers.ints.shouldBeInRange
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.io.File
import java.util.concurrent.TimeUnit

/**
 * The native host memory budget from the user's side, each case in a fresh JVM running
 * [NativeMemoryBudgetProgram] with -Xmx256m and a small budget: live tensors beyond the budget
 * fail with [NativeMemoryBudgetException] naming the budget and the fixes; forgotten tensors are
 * reclaimed at the budget instead of growing the process.
 */
class NativeMemoryBudgetTest : FunSpec({
    fun run(env: Map<String, String>, vararg args: String): Pair<Int, String> {
        val java = File(System.getProperty("java.home"), "bin/java").path
        val cp = System.getProperty("surefire.test.class.path") ?: System.getProperty("java.class.path")
        val log = File.createTempFile("tpcomm-budget-", ".log")
        try {
            val pb = ProcessBuilder(
                listOf(java, "-Xmx256m", "-XX:+UseParallelGC", "--enable-native-access=ALL-UNNAMED") +
                    env.filterKeys { it.startsWith("-") }.map { (k, v) -> "$k=$v" } +
                    listOf("-cp", cp, NativeMemoryBudgetProgram::class.java.name) + args,
            ).redirectErrorStream(true).redirectOutput(log)
            pb.environment().remove("TPCOMM_MEMORY_BUDGET")
            env.filterKeys { !it.startsWith("-") }.forEach { (k, v) -> pb.environment()[k] = v }
            val p = pb.start()
            if (!p.waitFor(60, TimeUnit.SECONDS)) {
                p.destroyForcibly().waitFor()
                return -1 to "did not finish within 60 s: " + log.readText().takeLast(2000)
            }
            return p.exitValue() to log.readText().takeLast(6000)
        } finally {
            log.delete()
        }
    }

    test("live tensors beyond -Dtpcomm.memory.budget fail with NativeMemoryBudgetException naming the budget, what holds it and the fixes") {
        val (rc, out) = run(mapOf("-Dtpcomm.memory.budget" to "64m"), "hold", (1 shl 20).toString(), "256")
        println(out)
        rc shouldBe 0
        out shouldContain "caught dev.tpcomm.NativeMemoryBudgetException"
        out shouldContain "budget of 64.0 MiB (from -Dtpcomm.memory.budget=64m)"
        out shouldContain "1.0 MiB blocks:"
        out shouldContain "close the tensors you no longer need"
        out shouldContain "-Dtpcomm.memory.budget=<size>"
        out shouldContain "TPCOMM_MEMORY_BUDGET=<size>"
        Regex("held (\\d+)").find(out)!!.groupValues[1].toInt() shouldBeInRange 56..64
    }

    test("TPCOMM_MEMORY_BUDGET sets the budget; large tensors (an arena each) count too") {
        val (rc, out) = run(mapOf("TPCOMM_MEMORY_BUDGET" to "40m"), "hold", (8 shl 20).toString(), "64")
        println(out)
        rc shouldBe 0
        out shouldContain "caught dev.tpcomm.NativeMemoryBudgetException"
        out shouldContain "budget of 40.0 MiB (from TPCOMM_MEMORY_BUDGET=40m)"
        out shouldContain "tensors over 4.0 MiB (an arena each): 40.0 MiB"
        Regex("held (\\d+)").find(out)!!.groupValues[1].toInt() shouldBe 5
    }

    test("1 MiB tensors forgotten 2,000 times stay within a 128 MiB budget: the garbage collector gives them back at the budget") {
        val (rc, out) = run(mapOf("-Dtpcomm.memory.budget" to "128m"), "forget", (1 shl 20).toString(), "2000", "700")
        println(out)
        out shouldContain "done forget"
        rc shouldBe 0
        val m = Regex("rss_start_mib ([0-9.]+) rss_peak_mib ([0-9.]+)").find(out)!!
        // Growth beyond the JVM's start: the budget (128 MiB) plus heap growth in a -Xmx256m JVM.
        (m.groupValues[2].toDouble() - m.groupValues[1].toDouble()) shouldBeLessThan 128 * 1.25 + 160
    }

    test("an explicit -XX:MaxDirectMemorySize is the budget when neither the property nor the environment variable is set") {
        val (rc, out) = run(mapOf("-XX:MaxDirectMemorySize" to "48m"), "hold", (1 shl 20).toString(), "256")
        println(out)
        rc shouldBe 0
        out shouldContain "budget of 48.0 MiB (from -XX:MaxDirectMemorySize=48.0 MiB)"
        Regex("held (\\d+)").find(out)!!.groupValues[1].toInt() shouldBeInRange 40..48
    }
})
