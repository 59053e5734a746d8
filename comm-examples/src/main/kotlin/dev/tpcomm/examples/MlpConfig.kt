package dev.tpcomm.examples

/**
 * Sizes and training settings of the demo's MLP block `Y = GeLU(X W1 + b1) W2 + b2`.
 *
 * Activations are `[seq * batch, hidden]` matrices whose rows are ordered sequence-major
 * (`row = s * batch + b`, Megatron's `[s, b, h]` layout), so a contiguous block of rows is a
 * block of sequence positions: that is what sequence parallelism shards.
 *
 * @property hidden model width H.
 * @property ffn inner width F (4H in transformers); must divide by the world size.
 * @property seq sequence length S; must divide by the world size in sequence-parallel mode.
 * @property batch batch size B.
 * @property steps training steps.
 * @property lr SGD learning rate.
 * @property seed seed of the initial weights and the synthetic data.
 */
public data class MlpConfig(
    val hidden: Int = 256,
    val ffn: Int = 1024,
    val seq: Int = 64,
    val batch: Int = 4,
    val steps: Int = 40,
    val lr: Float = 0.15f,
    val seed: Long = 42,
) {
    init {
        require(hidden >= 1 && ffn >= 1 && seq >= 1 && batch >= 1) { "hidden, ffn, seq and batch must be positive" }
        require(steps >= 1) { "steps must be at least 1, got $steps" }
        require(lr > 0f) { "lr must be positive, got $lr" }
    }

    /** Rows of an activation matrix: `seq * batch`. */
    val rows: Int get() = seq * batch

    /** Checks the sizes shard over [world] ranks. */
    public fun checkShardable(world: Int, sequenceParallel: Boolean) {
        require(ffn % world == 0) { "ffn $ffn is not divisible by the world size $world; pick ffn a multiple of $world" }
        if (sequenceParallel) {
            require(seq % world == 0) { "seq $seq is not divisible by the world size $world (sequence parallelism shards it); pick seq a multiple of $world" }
        }
    }
}
