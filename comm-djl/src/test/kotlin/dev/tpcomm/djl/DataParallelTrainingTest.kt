package dev.tpcomm.djl

import dev.tpcomm.CommConfig
import dev.tpcomm.coroutines.runLocalWorld
import dev.tpcomm.djl.example.DataParallelMlp
import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.doubles.shouldBeLessThan
import io.kotest.matchers.shouldBe
import kotlinx.coroutines.sync.Mutex
import kotlin.math.abs

/**
 * The example's data-parallel training matches single-process training on the in-process backend.
 *
 * Tolerance: float32 has a 2^-24 (6e-8) relative rounding unit. Splitting the batch changes the
 * order of the sums inside the loss mean and the weight gradients (each rank sums its rows, then
 * the all-reduce sums the ranks), so each gradient differs from the single-process one by a few
 * rounding units, and 8 SGD steps with momentum carry that into the weights. 1e-6 of the largest
 * weight (about 16 rounding units) bounds that with room to spare, while a missing or wrong
 * average (a rank's own gradient, a sum instead of the mean) moves the weights by 1e-2 or more.
 * One rank reorders nothing: it must match bit for bit. Ranks must agree bit for bit with each other.
 */
class DataParallelTrainingTest : FunSpec({
    val reference by lazy { DataParallelMlp.trainSingleProcess() }

    for (world in listOf(1, 2, 4)) {
        test("$world in-process ranks train the same model as one process on the whole batch") {
            val lock = Mutex()
            val perRank = runLocalWorld(world, CommConfig(worldSize = world)) { comm -> DataParallelMlp.trainDataParallel(comm, computeLock = lock) }
            for (r in 1 until world) withClue("rank $r vs rank 0") { equalBits(perRank[r], perRank[0]) shouldBe true }
            val error = maxRelativeError(perRank[0], reference)
            println("data parallel, $world in-process ranks: max |w - w_single| / max |w_single| = $error")
            if (world == 1) equalBits(perRank[0], reference) shouldBe true
            error shouldBeLessThan 1e-6
        }
    }
})

/** True when both lists of parameters hold the same float bits. */
internal fun equalBits(a: List<FloatArray>, b: List<FloatArray>): Boolean =
    a.size == b.size && a.indices.all { i -> a[i].size == b[i].size && a[i].indices.all { j -> a[i][j].toRawBits() == b[i][j].toRawBits() } }

/** Largest |a - b| over every parameter element, relative to the largest |b| of that parameter. */
internal fun maxRelativeError(a: List<FloatArray>, b: List<FloatArray>): Double {
    require(a.size == b.size && a.indices.all { a[it].size == b[it].size }) { "parameter shapes differ" }
    return a.indices.maxOf { i ->
        val scale = b[i].maxOf { abs(it) }.toDouble().coerceAtLeast(1e-30)
        a[i].indices.maxOf { j -> abs(a[i][j].toDouble() - b[i][j].toDouble()) } / scale
    }
}
