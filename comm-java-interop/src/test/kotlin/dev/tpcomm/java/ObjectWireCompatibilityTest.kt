package dev.tpcomm.java

import dev.tpcomm.allGatherObject
import dev.tpcomm.broadcastObject
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.future.await
import kotlinx.coroutines.withContext

/**
 * The `Class`-based object collectives of [JavaCommunicator] send the bytes comm-api's Kotlin
 * `allGatherObject`/`broadcastObject` send: Java and Kotlin ranks can share one collective.
 */
class ObjectWireCompatibilityTest : FunSpec({
    test("Java ranks using a Class and Kotlin ranks using a KSerializer meet in the same object collectives") {
        val results = withContext(Dispatchers.Default) {
            runLocalWorld(3) { comm ->
                val step = Step(comm.rank, comm.rank * 0.5, listOf("r${comm.rank}"))
                val java = JavaComm.wrap(comm)
                val all = if (comm.rank == 1) java.allGatherObject(step, Step::class.java).await() else comm.allGatherObject(step)
                val root = if (comm.rank == 2) java.broadcastObject(null, 0, Step::class.java).await()
                else comm.broadcastObject(if (comm.rank == 0) step else null, 0)
                val fromJavaRoot = if (comm.rank == 1) java.broadcastObject(step, 1, Step::class.java).await()
                else comm.broadcastObject<Step>(null, 1)
                Triple(all, root, fromJavaRoot)
            }
        }
        val steps = List(3) { Step(it, it * 0.5, listOf("r$it")) }
        results shouldBe List(3) { Triple(steps, steps[0], steps[1]) }
    }
})
