package dev.tpcomm.coroutines.local

import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import kotlinx.coroutines.runBlocking

/** A negative split color is refused on the in-process backend with the message every backend gives, and nothing is issued. */
class LocalSplitColorSpec : FunSpec({
    test("split(-1) is refused before any rank issues it, and the communicator stays usable") {
        runBlocking {
            runLocalWorld(2) { comm ->
                val e = shouldThrow<IllegalArgumentException> { comm.split(-1) }
                e.message shouldBe "split: color must be >= 0, or null to opt out; got -1"
                comm.split(null) shouldBe null // the next split still matches on every rank
            }
        }
    }
})
