package dev.tpcomm.examples

import java.util.SplittableRandom
import kotlin.math.sqrt

/**
 * Synthetic regression data and initial weights, the same on every rank for the same seed.
 *
 * Inputs are uniform in [-1, 1]; targets come from a fixed random "teacher" MLP of the same shape
 * as the student, so the loss can go down a long way. Deterministic; thread-safe (no shared state).
 */
public class SyntheticData(private val config: MlpConfig) {
    private val teacher = uniform(config.seed xor 0x5eed1, config.hidden * config.hidden, 2.0f / sqrt(config.hidden.toFloat()))
    private val batches = HashMap<Int, Pair<FloatArray, FloatArray>>()

    /**
     * The batch of [step]: inputs `X` and targets `T = tanh(X M)` for a fixed random `M`, both
     * `rows x hidden`. [DISTINCT_BATCHES] batches are cycled (and cached), so steps cost the
     * model's work, not the data's. Not thread-safe (the cache).
     */
    public fun batch(step: Int): Pair<FloatArray, FloatArray> = batches.getOrPut(step % DISTINCT_BATCHES) {
        val n = config.rows
        val h = config.hidden
        val x = uniform(config.seed * 1_000_003 + step % DISTINCT_BATCHES, n * h, 1f)
        val t = FloatArray(n * h)
        MatMul.mm(x, teacher, t, n, h, h)
        for (i in t.indices) t[i] = kotlin.math.tanh(t[i].toDouble()).toFloat()
        x to t
    }

    public companion object {
        /** How many distinct batches [batch] cycles through. */
        public const val DISTINCT_BATCHES: Int = 8

        /** [n] values uniform in `[-scale, scale]` from [seed]. */
        public fun uniform(seed: Long, n: Int, scale: Float): FloatArray {
            val r = SplittableRandom(seed)
            return FloatArray(n) { ((r.nextDouble() * 2 - 1) * scale).toFloat() }
        }

        /** The student's initial weights (W1 `hidden x ffn`, b1 `ffn`, W2 `ffn x hidden`, b2 `hidden`). */
        public fun initialWeights(config: MlpConfig): MlpWeights = MlpWeights(
            w1 = uniform(config.seed + 1, config.hidden * config.ffn, 1f / sqrt(config.hidden.toFloat())),
            b1 = FloatArray(config.ffn),
            w2 = uniform(config.seed + 2, config.ffn * config.hidden, 1f / sqrt(config.ffn.toFloat())),
            b2 = FloatArray(config.hidden),
        )
    }
}

/** The MLP's parameters, row-major: W1 `hidden x ffn`, b1 `ffn`, W2 `ffn x hidden`, b2 `hidden`. */
public class MlpWeights(public val w1: FloatArray, public val b1: FloatArray, public val w2: FloatArray, public val b2: FloatArray) {
    /** Parameters in a fixed order with their names. */
    public fun named(): List<Pair<String, FloatArray>> = listOf("W1" to w1, "b1" to b1, "W2" to w2, "b2" to b2)
}
