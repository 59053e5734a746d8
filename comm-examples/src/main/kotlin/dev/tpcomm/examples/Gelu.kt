package dev.tpcomm.examples

import kotlin.math.sqrt
import kotlin.math.tanh

/** GeLU, tanh approximation (as GPT-2 and Megatron use), and its derivative; computed in double, rounded to float. */
public object Gelu {
    private val C = sqrt(2.0 / Math.PI)

    /** `gelu(x)`. */
    public fun value(x: Float): Float {
        val xd = x.toDouble()
        return (0.5 * xd * (1.0 + tanh(C * (xd + 0.044715 * xd * xd * xd)))).toFloat()
    }

    /** `d gelu(x) / dx`. */
    public fun derivative(x: Float): Float {
        val xd = x.toDouble()
        val u = C * (xd + 0.044715 * xd * xd * xd)
        val t = tanh(u)
        val du = C * (1.0 + 3 * 0.044715 * xd * xd)
        return (0.5 * (1.0 + t) + 0.5 * xd * (1.0 - t * t) * du).toFloat()
    }

    /** `out[i] = gelu(z[i])` for the first [n] elements. */
    public fun forward(z: FloatArray, out: FloatArray, n: Int = z.size) {
        for (i in 0 until n) out[i] = value(z[i])
    }

    /** `dz[i] = da[i] * gelu'(z[i])` for the first [n] elements. */
    public fun backward(z: FloatArray, da: FloatArray, dz: FloatArray, n: Int = z.size) {
        for (i in 0 until n) dz[i] = da[i] * derivative(z[i])
    }
}
