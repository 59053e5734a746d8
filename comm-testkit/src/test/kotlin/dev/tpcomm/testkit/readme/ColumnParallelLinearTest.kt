package dev.tpcomm.testkit.readme

// README-SNIPPET-BEGIN testing-your-own-layer
import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.testkit.WorldCheckConfig
import dev.tpcomm.testkit.forAllWorlds
import dev.tpcomm.testkit.shouldBeCloseTo
import dev.tpcomm.testkit.tensor
import io.kotest.core.spec.style.FunSpec
import io.kotest.property.Arb
import io.kotest.property.arbitrary.bind
import io.kotest.property.arbitrary.flatMap
import io.kotest.property.arbitrary.int

/** The dense layer: y = x W, with x of shape [batch, in] and W of shape [in, out]. */
fun linear(x: Tensor, w: Tensor): Tensor {
    val (batch, inFeatures) = x.shape
    val outFeatures = w.shape[1]
    val y = Tensor.zeros(DType.Float32, batch, outFeatures)
    for (b in 0 until batch) for (o in 0 until outFeatures) {
        var sum = 0.0
        for (i in 0 until inFeatures) sum += x.getDouble((b * inFeatures + i).toLong()) * w.getDouble((i * outFeatures + o).toLong())
        y.setDouble((b * outFeatures + o).toLong(), sum)
    }
    return y
}

/**
 * The column-parallel layer: rank r keeps only columns [r * out / n, (r + 1) * out / n) of W,
 * computes its slice of y, and an allGather along the columns gives every rank the whole y.
 */
class ColumnParallelLinear(private val comm: Communicator, weight: Tensor) {
    private val shard = weight.chunk(comm.worldSize, dim = 1)[comm.rank]

    suspend fun forward(x: Tensor): Tensor = comm.allGather(linear(x, shard), dim = 1)
}

/** An input and a full weight whose columns split evenly over [worldSize] ranks. */
class LayerCase(val x: Tensor, val w: Tensor) {
    override fun toString(): String = "x ${x.shape}, w ${w.shape}"
}

fun layerCases(worldSize: Int): Arb<LayerCase> =
    Arb.bind(Arb.int(1..4), Arb.int(1..8), Arb.int(1..3)) { batch, inFeatures, columnsPerRank ->
        Triple(batch, inFeatures, columnsPerRank * worldSize)
    }.flatMap { (batch, inFeatures, outFeatures) ->
        Arb.bind(Arb.tensor(DType.Float32, listOf(batch, inFeatures)), Arb.tensor(DType.Float32, listOf(inFeatures, outFeatures))) { x, w ->
            LayerCase(x, w)
        }
    }

class ColumnParallelLinearTest : FunSpec({
    test("the column-parallel layer computes what the dense layer computes, on 1 to 4 ranks") {
        forAllWorlds(WorldCheckConfig(worldSizes = listOf(1, 2, 3, 4), iterations = 30), input = ::layerCases) { comm, case ->
            val y = ColumnParallelLinear(comm, case.w).forward(case.x)
            y.shouldBeCloseTo(linear(case.x, case.w), rtol = 1e-5, atol = 1e-5)
        }
    }
})
// README-SNIPPET-END testing-your-own-layer

/** The same property catches a broken layer: every rank keeping shard 0 shows on two ranks. */
class BrokenColumnParallelLinear(private val comm: Communicator, weight: Tensor) {
    private val shard = weight.chunk(comm.worldSize, dim = 1)[0]

    suspend fun forward(x: Tensor): Tensor = comm.allGather(linear(x, shard), dim = 1)
}
