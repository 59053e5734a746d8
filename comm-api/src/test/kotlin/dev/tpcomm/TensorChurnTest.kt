package dev.tpcomm

import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.io.File
import java.util.concurrent.TimeUnit

/**
 * From the user's side: a loop that allocates millions of small tensors must run in a small heap,
 * whether it closes them or forgets them. Each case runs [TensorChurnProgram] in a fresh JVM with
 * -Xmx256m (so the heap limit is real and the test's own JVM is not at risk).
 */
class TensorChurnTest : FunSpec({
    fun runChurn(mode: String, n: Long, limitSeconds: Long): Pair<Int, String> {
        val java = File(System.getProperty("java.home"), "bin/java").path
        val cp = System.getProperty("surefire.test.class.path") ?: System.getProperty("java.class.path")
        val log = File.createTempFile("tpcomm-churn-", ".log")
        try {
            val p = ProcessBuilder(java, "-Xmx256m", "-XX:+UseParallelGC", "-cp", cp, TensorChurnProgram::class.java.name, mode, n.toString())
                .redirectErrorStream(true).redirectOutput(log).start()
            if (!p.waitFor(limitSeconds, TimeUnit.SECONDS)) {
                p.destroyForcibly().waitFor()
                return -1 to "did not finish within $limitSeconds s: " + log.readText().takeLast(2000)
            }
            return p.exitValue() to log.readText().takeLast(4000)
        } finally {
            log.delete()
        }
    }

    test("3M fresh 8-byte tensors that are never closed run in -Xmx256m") {
        val (rc, out) = runChurn("forget", 3_000_000, 180)
        println("forget: rc=$rc $out")
        out shouldContain "done forget 3000000"
        rc shouldBe 0
    }

    test("1M fresh 8-byte tensors allocated and closed run in -Xmx256m within 15 s") {
        val (rc, out) = runChurn("close", 1_000_000, 15)
        println("close: rc=$rc $out")
        out shouldContain "done close 1000000"
        rc shouldBe 0
    }
})
