package dev.tpcomm.coroutines.async

import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import java.io.File

// README-SNIPPET-BEGIN quickstart-kotlin
suspend fun quickstart(): List<Float> {
    // Four ranks as coroutines of this JVM. Under mpirun, use Comm.create("mpi") (or "auto") instead.
    return runLocalWorld(worldSize = 4) { comm ->
        val x = Tensor.of(floatArrayOf(comm.rank.toFloat(), 1f))
        comm.allReduce(x)                                   // in place: [0+1+2+3, 4] on every rank
        val all = comm.allGather(Tensor.of(floatArrayOf(comm.rank.toFloat())))   // [0, 1, 2, 3]
        val pair = comm.split(color = comm.rank / 2)!!      // ranks {0, 1} and {2, 3}
        pair.allReduce(Tensor.of(floatArrayOf(1f)))         // [2] in each pair
        x.getFloat(0) + all.getFloat(3)                     // 9 on every rank
    }
}
// README-SNIPPET-END quickstart-kotlin

class QuickstartExampleSpec : FunSpec({
    test("the README's quickstart runs and computes 9 on every rank") {
        quickstart() shouldBe List(4) { 9f }
    }

    test("README.md holds exactly the quickstart compiled above") {
        val source = File("src/test/kotlin/dev/tpcomm/coroutines/async/QuickstartExampleSpec.kt").readText()
        val code = snippet(source, "quickstart-kotlin")
        code.contains("runLocalWorld") shouldBe true
        File("../README.md").readText().contains("```kotlin\n" + code + "```") shouldBe true
    }
})
