package dev.tpcomm.coroutines

import dev.tpcomm.coroutines.local.ChildJvm
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldBeEmpty
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.io.File

/**
 * A training loop that all-reduces small tensors for a while and then large ones (issue 37: the
 * first calls): the in-process backend's vector kernels must not be deoptimised at the switch. Before
 * the fix, C2 compiled `VectorKernels.f32Sum` while it saw only 2-element calls, with its vector loop
 * as an uncommon trap; the first 1 MiB call hit it (`unstable_if`), and the kernel ran the Vector API
 * in the interpreter: 333-609 ms for that call, 73-119 ms for the next two (a quiet run: 0.09 ms
 * each once compiled). A child JVM, as a user's `java` command, with the JIT's deoptimisation log;
 * the test reads the log, not a clock.
 */
class SizeSwitchDeoptTest : FunSpec({
    test("30,000 8-byte all-reduces then 1 MiB ones: no vector kernel is deoptimised at the switch") {
        val log = File.createTempFile("tpcomm-deopt-", ".log")
        try {
            val (code, out) = ChildJvm.run(
                "dev.tpcomm.coroutines.SizeSwitchProgram",
                // The flags README gives every program: with the Vector API module the vector kernels run.
                listOf("--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector", "-Dtpcomm.jmx=false",
                    "-Xlog:deoptimization=debug:file=${log.path}"),
                listOf("30000"),
                limitSeconds = 180,
            )
            code shouldBe 0
            out shouldContain "large_ms="
            val deopts = log.readLines().filter { "VectorKernels" in it && "unstable_if" in it }
            deopts.shouldBeEmpty()
        } finally {
            log.delete()
        }
    }
})
