package dev.tpcomm.testkit.readme

import dev.tpcomm.testkit.WorldCheckConfig
import dev.tpcomm.testkit.WorldPropertyException
import dev.tpcomm.testkit.forAllWorlds
import dev.tpcomm.testkit.shouldBeCloseTo
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.io.File

/** The "Testing your own layer" block of docs/testing.md is [ColumnParallelLinearTest]'s source, verbatim, and its property can fail. */
class TestingYourOwnLayerReadmeTest : FunSpec({
    fun snippet(text: String, name: String): String {
        val begin = "// README-SNIPPET-BEGIN $name\n"
        val end = "// README-SNIPPET-END $name"
        check(text.contains(begin) && text.contains(end)) { "markers of snippet $name not found" }
        return text.substringAfter(begin).substringBefore(end)
    }

    test("docs/testing.md holds exactly the column-parallel test compiled and run by ColumnParallelLinearTest") {
        val code = snippet(File("src/test/kotlin/dev/tpcomm/testkit/readme/ColumnParallelLinearTest.kt").readText(), "testing-your-own-layer")
        code.contains("class ColumnParallelLinearTest : FunSpec") shouldBe true
        val readme = File("../docs/testing.md").readText()
        val block = readme.substringAfter("<!-- README-SNIPPET testing-your-own-layer: begin -->\n", "")
            .substringBefore("<!-- README-SNIPPET testing-your-own-layer: end -->")
        block shouldBe "```kotlin\n" + code + "```\n"
    }

    test("the guide's property catches a layer whose ranks all keep shard 0, and names the smallest world") {
        val e = shouldThrow<WorldPropertyException> {
            forAllWorlds(WorldCheckConfig(worldSizes = listOf(1, 2, 3, 4), iterations = 5, seed = 3), input = ::layerCases) { comm, case ->
                BrokenColumnParallelLinear(comm, case.w).forward(case.x).shouldBeCloseTo(linear(case.x, case.w), rtol = 1e-5, atol = 1e-5)
            }
        }
        e.worldSize shouldBe 2
        e.firstFailedWorldSize shouldBe 4
        e.message shouldContain "is not close to the expected tensor"
        e.message shouldContain "worst at [1, 3] (flat index 7): actual -7.5870466, expected -3.8391075"
        e.message shouldContain "world sizes tried: 1 passed, 2 failed, 4 failed (iteration 1 of 5)"
    }
})
