package dev.tpcomm.examples

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import java.io.PrintStream
import java.util.Locale
import kotlin.math.abs
import kotlin.math.max

/**
 * What one rank's demo run found (the same on every rank).
 *
 * @property losses the loss before each training step.
 * @property maxRelativeError the largest, over the compared tensors, of `max|tp - dense| / max|dense|`.
 * @property worst the tensor where [maxRelativeError] was found.
 * @property msPerStepNoOverlap median time per step without overlap (max over ranks), null when not timed.
 * @property msPerStepOverlap the same with overlap.
 */
public data class DemoOutcome(
    val losses: List<Float>,
    val maxRelativeError: Double,
    val worst: String,
    val msPerStepNoOverlap: Double?,
    val msPerStepOverlap: Double?,
)

/**
 * The demo on one rank: trains the tensor-parallel MLP (with overlap), checks it against the dense
 * model trained on one rank from the same initial weights and data, then times steps with and
 * without overlap. Rank 0 prints to [out] and the progress bar to [err]. Collective: every rank
 * of [comm] calls [run] with the same options.
 */
public class TpDemo(
    private val comm: Communicator,
    private val options: DemoOptions,
    private val out: PrintStream? = System.out,
    private val err: PrintStream? = System.err,
) {
    private val config = options.model
    private val reporter = comm.rank == 0

    /** Runs the demo; see the class comment. */
    public suspend fun run(): DemoOutcome {
        val data = SyntheticData(config)
        val init = SyntheticData.initialWeights(config)
        say(String.format(Locale.ROOT,
            "tpcomm tensor-parallel MLP: backend %s, %d ranks, %s, hidden %d, ffn %d (%d per rank), seq %d, batch %d, %d steps, lr %s",
            comm.backendName, comm.worldSize,
            if (options.sequenceParallel) "sequence-parallel (all-gather / reduce-scatter along the sequence)" else "tensor-parallel (all-reduce)",
            config.hidden, config.ffn, config.ffn / comm.worldSize, config.seq, config.batch, config.steps, config.lr))

        // 1. Train with overlap.
        val losses = ArrayList<Float>()
        val tp = TensorParallelMlp(comm, config, init, options.sequenceParallel, overlap = true)
        val progress = if (reporter && options.progress && err != null) Progress(config.steps, "training", err) else null
        val printEvery = max(1, config.steps / 10)
        var lastPrinted = -1
        for (step in 0 until config.steps) {
            val (x, t) = data.batch(step)
            val loss = tp.step(x, t)
            losses += loss
            if (step == 0 || (step + 1) % printEvery == 0 || step == config.steps - 1) {
                // The mean over the steps since the last line: single batches differ, their mean falls steadily.
                val from = if (step == 0) 0 else maxOf(1, lastPrinted + 1)
                val mean = losses.subList(from, step + 1).average()
                progress?.clear()
                say(String.format(Locale.ROOT, "steps %3d-%-3d of %d  mean loss %.6f", from + 1, step + 1, config.steps, mean))
                lastPrinted = step
            }
            progress?.update(step + 1, String.format(Locale.ROOT, "loss %.5f", loss))
        }

        // 2. Check against the dense model (computed on rank 0, result broadcast).
        val got = tp.gatherWeights()
        val output = tp.gatherOutput()
        val inputGrad = tp.gatherInputGrad()
        tp.close()
        val verdict = Tensor.zeros(DType.Float64, 2)
        var worst = ""
        if (reporter) {
            val (err, where) = compareWithDense(data, init, got, output, inputGrad, losses)
            verdict.setDouble(0, err)
            verdict.setDouble(1, WHERE.indexOf(where).toDouble())
            worst = where
        }
        comm.broadcast(verdict, 0)
        val relErr = verdict.getDouble(0)
        worst = WHERE[verdict.getDouble(1).toInt().coerceIn(0, WHERE.size - 1)]
        say(String.format(Locale.ROOT, "matches dense: max relative error %.3e", relErr) +
            if (relErr < options.tolerance) "" else " (FAILED: at least ${options.tolerance}, worst in $worst)")

        // 3. Time per step, with and without overlap (alternating rounds, median per mode).
        var noOverlap: Double? = null
        var withOverlap: Double? = null
        if (options.timingSteps > 0) {
            val times = mapOf(false to ArrayList<Double>(), true to ArrayList<Double>())
            repeat(TIMING_ROUNDS) {
                for (overlap in listOf(false, true)) times.getValue(overlap) += timeSteps(data, init, overlap)
            }
            noOverlap = times.getValue(false).sorted()[TIMING_ROUNDS / 2]
            withOverlap = times.getValue(true).sorted()[TIMING_ROUNDS / 2]
            say(String.format(Locale.ROOT,
                "time per step: %.2f ms without overlap, %.2f ms with overlap (speed-up %.2fx; median of %d rounds of %d steps, max over ranks)",
                noOverlap, withOverlap, noOverlap / withOverlap, TIMING_ROUNDS, options.timingSteps))
            say(overlapNote(noOverlap / withOverlap, comm.worldSize, Runtime.getRuntime().availableProcessors(), comm.backendName, options.sequenceParallel))
        }
        return DemoOutcome(losses, relErr, worst, noOverlap, withOverlap)
    }

    /** Trains the dense model the same steps and returns the worst relative error and where. */
    private fun compareWithDense(
        data: SyntheticData, init: MlpWeights, got: MlpWeights, output: FloatArray, inputGrad: FloatArray, losses: List<Float>,
    ): Pair<Double, String> {
        val dense = DenseMlp(config, init)
        val denseLosses = FloatArray(config.steps)
        for (step in 0 until config.steps) {
            val (x, t) = data.batch(step)
            denseLosses[step] = dense.step(x, t)
        }
        // dense.output and dense.inputGrad are those of the last step's forward and backward, as the TP model's are.
        val pairs = listOf(
            "W1" to (got.w1 to dense.weights.w1),
            "b1" to (got.b1 to dense.weights.b1),
            "W2" to (got.w2 to dense.weights.w2),
            "b2" to (got.b2 to dense.weights.b2),
            "Y" to (output to dense.output),
            "dX" to (inputGrad to dense.inputGrad),
            "loss" to (losses.toFloatArray() to denseLosses),
        )
        var worst = 0.0
        var where = "W1"
        for ((name, p) in pairs) {
            val e = relativeError(p.first, p.second)
            if (e > worst || e.isNaN()) { worst = e; where = name }
        }
        return worst to where
    }

    /** One timing round: fresh model, 2 warm-up steps, [DemoOptions.timingSteps] timed; ms per step, max over ranks. */
    private suspend fun timeSteps(data: SyntheticData, init: MlpWeights, overlap: Boolean): Double {
        TensorParallelMlp(comm, config, init, options.sequenceParallel, overlap).use { m ->
            repeat(2) { val (x, t) = data.batch(it); m.step(x, t) }
            comm.barrier()
            val t0 = System.nanoTime()
            for (s in 0 until options.timingSteps) {
                val (x, t) = data.batch(s)
                m.step(x, t)
            }
            val ms = (System.nanoTime() - t0) / 1e6 / options.timingSteps
            val tm = Tensor.zeros(DType.Float64, 1)
            tm.setDouble(0, ms)
            comm.allReduce(tm, ReduceOp.Max)
            return tm.getDouble(0)
        }
    }

    private fun say(line: String) {
        if (reporter) out?.let { it.println(line); it.flush() }
    }

    public companion object {
        private val WHERE = listOf("W1", "b1", "W2", "b2", "Y", "dX", "loss")
        private const val TIMING_ROUNDS = 3

        /**
         * The line after the timing: what the overlap [speedUp] (time without / time with) means.
         * Below 1.05 it says why overlap cannot pay on a machine where [ranks] ranks share [cores]
         * cores with collectives that are themselves CPU work ([backend] "local" or "mpi" on one
         * host), rather than leaving a bare "0.85x" to read as a bug.
         */
        internal fun overlapNote(speedUp: Double, ranks: Int, cores: Int, backend: String, sequenceParallel: Boolean): String {
            if (speedUp >= 1.05) {
                return String.format(Locale.ROOT, "overlap: the step is %.2fx faster with the collectives running behind the compute", speedUp)
            }
            val verdict = if (speedUp < 0.95) String.format(Locale.ROOT, "overlap made the step slower here (%.2fx)", speedUp)
            else String.format(Locale.ROOT, "overlap made no difference here (%.2fx)", speedUp)
            val split = if (sequenceParallel) "" else
                ", and the overlapped step issues the forward all-reduce as two half-size calls (two per-call costs, two smaller matrix products)"
            val why = when (backend.lowercase(Locale.ROOT)) {
                "local", "mpi" ->
                    ": on the $backend backend a collective between ranks of one machine is CPU work (copies and reductions in memory) " +
                        "done by the same $ranks ranks that compute, on this machine's $cores core${if (cores == 1) "" else "s"}, " +
                        "so no core is left idle for the communication to run on while a rank computes$split. " +
                        "Overlap pays where transfers run on hardware of their own (a network, NVLink, a GPU's copy engines) or wait " +
                        "for a late peer; scripts/overlap.sh measures that hidden waiting (docs/overlap.md)"
                else -> if (sequenceParallel) "" else
                    ": the overlapped step issues the forward all-reduce as two half-size calls (two per-call costs, two smaller matrix products), " +
                        "which the communication it hid did not repay"
            }
            return verdict + why
        }

        /** `max|a - b| / max|b|` (0 when both are all zeros; infinite when only [b] is). */
        public fun relativeError(a: FloatArray, b: FloatArray): Double {
            require(a.size == b.size) { "compared arrays differ in size: ${a.size} and ${b.size}" }
            var diff = 0.0
            var scale = 0.0
            for (i in a.indices) {
                val d = abs(a[i].toDouble() - b[i].toDouble())
                if (d > diff || d.isNaN()) diff = d
                scale = max(scale, abs(b[i].toDouble()))
            }
            return when {
                diff.isNaN() -> Double.NaN
                diff == 0.0 -> 0.0
                else -> diff / scale
            }
        }
    }
}
