package dev.tpcomm.testkit

import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.nio.file.Files

class SpmdConformanceMainTest : FunSpec({
    test("a world of one on the local backend runs the selected cases and writes its report") {
        val dir = Files.createTempDirectory("spmd-main")
        val failed = SpmdConformanceMain.run(SpmdConformanceMain.parse(arrayOf("--backend", "local", "--reports", dir.toString(), "--cases", "^(allReduce|failure: use after close)")))
        failed shouldBe 0
        val xml = Files.readString(dir.resolve("TEST-local-1-rank0.xml"))
        xml shouldContain "tests=\"2\""
        xml shouldContain "failures=\"0\""
        xml shouldContain "failure: use after close [rank 0 of 1]"
    }

    test("bad arguments are refused with a message saying what is wrong") {
        shouldThrow<IllegalArgumentException> { SpmdConformanceMain.parse(arrayOf("--scratch", "maybe")) }.message shouldContain "create, split or none"
        shouldThrow<IllegalArgumentException> { SpmdConformanceMain.parse(arrayOf("--bogus")) }.message shouldContain "unknown argument"
        shouldThrow<IllegalArgumentException> { SpmdConformanceMain.parse(arrayOf("--backend")) }.message shouldContain "needs a value"
        shouldThrow<IllegalArgumentException> { SpmdConformanceMain.parse(arrayOf("--scratch-option", "novalue")) }.message shouldContain "KEY=VALUE"
    }

    test("--scratch-option collects backend options for the scratch communicators (tpcomm-check's MPI failure cases)") {
        val a = SpmdConformanceMain.parse(
            arrayOf("--scratch-option", "mpi.abortOnTimeout=false", "--backend", "mpi", "--scratch-option", "mpi.progress=NonBlocking", "--cases", "x"),
        )
        a.scratchOptions shouldBe mapOf("mpi.abortOnTimeout" to "false", "mpi.progress" to "NonBlocking")
        a.backend shouldBe "mpi"
        a.cases?.pattern shouldBe "x"
    }
})
