package dev.tpcomm.coroutines.local

import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain

/**
 * Issue 34: messages the in-process backend buffers (above 1 MiB: a send to the sender's own rank,
 * or any send under a raised `local.eagerLimit`) count against the native memory budget. Before,
 * they lived in `Arena.ofAuto()` memory outside it: 100 unreceived 8 MiB sends (800 MiB) passed a
 * 64 MiB budget without a word, freed only when the garbage collector found them.
 */
class UnreceivedMessagesTest : FunSpec({
    fun run(mode: String): Pair<Int, String> = ChildJvm.run(
        UnreceivedMessagesProgram::class.java.name,
        listOf("-Xmx256m", "--enable-native-access=ALL-UNNAMED", "-Dtpcomm.memory.budget=64m"), listOf(mode),
    )

    test("unreceived 8 MiB messages buffered by the library end in NativeMemoryBudgetException at a 64 MiB budget") {
        val (rc, out) = run("forget")
        rc shouldBe 0
        out shouldContain "caught NativeMemoryBudgetException after"
        out shouldContain "budget of 64.0 MiB"
    }

    test("a send that fails for want of budget answers no posted probe; the probe sees the message once a later send succeeds") {
        val (rc, out) = run("probe")
        rc shouldBe 0
        out shouldContain "tag 7 send failed for want of budget: true"
        out shouldContain "probe answered by the failed send: false"
        out shouldContain "probe saw 8388608 bytes with tag 7; received 7.0"
    }

    test("received ones give their memory back at once: 200 rounds of 8 MiB, then 56 MiB held, at a 64 MiB budget") {
        val (rc, out) = run("receive")
        rc shouldBe 0
        out shouldContain "received 200 sends of 8 MiB, then held 56 MiB"
    }
})
