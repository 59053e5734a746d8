package dev.tpcomm.examples

/**
 * The reference: the same MLP block computed densely on one rank, in float32, with the same
 * kernels, loss and SGD update as [TensorParallelMlp].
 *
 * Loss: `L = sum((Y - T)^2) / (2 * rows)`, so `dY = (Y - T) / rows`. Not thread-safe.
 */
public class DenseMlp(private val config: MlpConfig, initial: MlpWeights) {
    private val h = config.hidden
    private val f = config.ffn
    private val n = config.rows

    /** Current parameters (updated in place by [step]). */
    public val weights: MlpWeights = MlpWeights(initial.w1.copyOf(), initial.b1.copyOf(), initial.w2.copyOf(), initial.b2.copyOf())

    private val z = FloatArray(n * f)
    private val a = FloatArray(n * f)
    private val y = FloatArray(n * h)
    private val dy = FloatArray(n * h)
    private val da = FloatArray(n * f)
    private val dz = FloatArray(n * f)
    private val dw1 = FloatArray(h * f)
    private val dw2 = FloatArray(f * h)
    private val scratch = FloatArray(f * h)

    /** The input gradient `dX` of the last [step] (`rows x hidden`), computed with the weights before the update. */
    public val inputGrad: FloatArray = FloatArray(n * h)

    /** The output `Y` of the last [forward] (`rows x hidden`). */
    public val output: FloatArray get() = y

    /** Forward pass on [x]; returns the loss against [t]. */
    public fun forward(x: FloatArray, t: FloatArray): Float {
        val w = weights
        MatMul.mm(x, w.w1, z, n, h, f)
        addRowVector(z, w.b1, n, f)
        Gelu.forward(z, a)
        MatMul.mm(a, w.w2, y, n, f, h)
        addRowVector(y, w.b2, n, h)
        var loss = 0.0
        for (i in 0 until n * h) {
            val d = y[i] - t[i]
            loss += d.toDouble() * d
        }
        return (loss / (2.0 * n)).toFloat()
    }

    /** One SGD step on the batch ([x], [t]); returns the loss before the update. */
    public fun step(x: FloatArray, t: FloatArray): Float {
        val loss = forward(x, t)
        val w = weights
        val inv = 1f / n
        for (i in 0 until n * h) dy[i] = (y[i] - t[i]) * inv
        val db2 = columnSums(dy, n, h)
        MatMul.mmTransA(a, dy, dw2, n, f, h)
        MatMul.mmTransB(dy, w.w2, da, n, h, f, scratch)
        Gelu.backward(z, da, dz)
        MatMul.mmTransB(dz, w.w1, inputGrad, n, f, h, scratch)
        MatMul.mmTransA(x, dz, dw1, n, h, f)
        val db1 = columnSums(dz, n, f)
        sgd(w.w1, dw1, config.lr)
        sgd(w.b1, db1, config.lr)
        sgd(w.w2, dw2, config.lr)
        sgd(w.b2, db2, config.lr)
        return loss
    }

    internal companion object {
        fun addRowVector(m: FloatArray, v: FloatArray, rows: Int, cols: Int) {
            for (r in 0 until rows) {
                val o = r * cols
                for (c in 0 until cols) m[o + c] += v[c]
            }
        }

        fun columnSums(m: FloatArray, rows: Int, cols: Int, out: FloatArray = FloatArray(cols)): FloatArray {
            out.fill(0f)
            for (r in 0 until rows) {
                val o = r * cols
                for (c in 0 until cols) out[c] += m[o + c]
            }
            return out
        }

        fun sgd(p: FloatArray, g: FloatArray, lr: Float) {
            for (i in p.indices) p[i] -= lr * g[i]
        }
    }
}
