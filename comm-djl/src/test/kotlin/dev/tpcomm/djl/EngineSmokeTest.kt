package dev.tpcomm.djl

import ai.djl.engine.Engine
import ai.djl.ndarray.NDManager
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe

class EngineSmokeTest : FunSpec({
    test("PyTorch loads offline from the Maven jars") {
        val e = Engine.getEngine("PyTorch")
        println("engine ${e.engineName} ${e.version} cache=${ai.djl.util.Utils.getEngineCacheDir("pytorch")} offline=${ai.djl.util.Utils.isOfflineMode()}")
        NDManager.newBaseManager().use { m ->
            val a = m.create(floatArrayOf(1f, 2f, 3f))
            a.sum().getFloat() shouldBe 6f
        }
    }
})
