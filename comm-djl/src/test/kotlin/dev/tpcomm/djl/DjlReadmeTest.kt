package dev.tpcomm.djl

import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import java.io.File

/** The DJL example of docs/djl.md is the code DataParallelTrainingTest and DataParallelMpiTest run, verbatim (less its indentation). */
class DjlReadmeTest : FunSpec({
    test("docs/djl.md holds DataParallelMlp.trainDataParallel as compiled and tested") {
        val source = File("src/test/kotlin/dev/tpcomm/djl/example/DataParallelMlp.kt").readText()
        val begin = "// README-SNIPPET-BEGIN djl-data-parallel\n"
        val end = "// README-SNIPPET-END djl-data-parallel"
        check(source.contains(begin) && source.contains(end)) { "snippet markers not found in DataParallelMlp.kt" }
        val code = source.substringAfter(begin).substringBefore(end).trimIndent() + "\n"
        val block = File("../docs/djl.md").readText()
            .substringAfter("<!-- README-SNIPPET djl-data-parallel: begin -->\n", "")
            .substringBefore("<!-- README-SNIPPET djl-data-parallel: end -->")
        block shouldBe "```kotlin\n$code```\n"
    }
})
