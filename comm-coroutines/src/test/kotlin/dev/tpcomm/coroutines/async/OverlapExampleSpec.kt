package dev.tpcomm.coroutines.async

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.DeviceMesh
import dev.tpcomm.coroutines.allReduceAsync
import dev.tpcomm.coroutines.allReduceCoalesced
import dev.tpcomm.coroutines.allReducePipelined
import dev.tpcomm.coroutines.awaitAll
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.withContext
import java.io.File
import kotlin.time.Duration.Companion.seconds

// README-SNIPPET-BEGIN overlap-kotlin
/** Stands for the backward pass of one layer: writes that layer's gradient. */
fun backward(layer: Int, rank: Int, grad: Tensor) {
    grad.fill(rank + layer.toDouble())
}

suspend fun trainStep(comm: Communicator, grads: List<Tensor>) = coroutineScope {
    // Start each layer's all-reduce as soon as its gradient exists, without waiting:
    // it is issued now, in program order, and runs while the next layer's backward computes.
    val pending = grads.mapIndexed { layer, grad ->
        backward(layer, comm.rank, grad)
        allReduceAsync(comm, grad)
    }
    // Wait for all of them; past the deadline: CommunicationTimeoutException, collectives aborted.
    pending.awaitAll(timeout = 30.seconds, comm = comm)
}

suspend fun overlapExample(): List<Float> = runLocalWorld(worldSize = 4) { comm ->
    val grads = List(8) { Tensor.zeros(DType.Float32, 1024) }
    trainStep(comm, grads)

    // The same pipeline in one call: chunk i's all-reduce overlaps chunk i + 1's compute.
    comm.allReducePipelined(grads) { layer, grad -> backward(layer, comm.rank, grad) }

    // Tensor fusion: many small tensors, one dtype, few collectives.
    val biases = List(100) { Tensor.of(floatArrayOf(comm.rank.toFloat())) }
    comm.allReduceCoalesced(biases, thresholdBytes = 64L shl 20)

    // Data-parallel x tensor-parallel groups from one call.
    DeviceMesh(comm, shape = listOf(2, 2), names = listOf("dp", "tp")).use { mesh ->
        mesh["tp"].allReduce(Tensor.of(floatArrayOf(1f)))
        mesh["dp"].allReduce(grads[0])
    }
    grads[0].getFloat(0)
}
// README-SNIPPET-END overlap-kotlin

class OverlapExampleSpec : FunSpec({
    test("the Kotlin overlap example of docs/overlap.md runs and computes the right values") {
        // gradient of layer 0 on rank r is r: the all-reduce over 4 ranks gives 6, then the dp all-reduce over 2 ranks 12
        withContext(Dispatchers.Default) { overlapExample() } shouldBe List(4) { 12f }
    }

    test("docs/overlap.md holds exactly the code compiled above") {
        val source = File("src/test/kotlin/dev/tpcomm/coroutines/async/OverlapExampleSpec.kt").readText()
        val doc = File("../docs/overlap.md").readText()
        val code = snippet(source, "overlap-kotlin")
        (code.length > 500 && code.contains("allReduceAsync")) shouldBe true
        doc.contains(code) shouldBe true
    }
})

/** The text between the README-SNIPPET markers named [name]. */
fun snippet(text: String, name: String): String =
    text.substringAfter("// README-SNIPPET-BEGIN $name\n").substringBefore("// README-SNIPPET-END $name")
