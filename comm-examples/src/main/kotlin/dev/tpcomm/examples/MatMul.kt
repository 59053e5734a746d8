package dev.tpcomm.examples

import jdk.incubator.vector.FloatVector
import jdk.incubator.vector.VectorSpecies

/**
 * Small float32 matrix kernels over row-major `FloatArray`s, enough for the demo's MLP without a
 * BLAS. Every output element is one fused multiply-add chain over `k` in ascending order
 * (`Math.fma` or the Vector API's `fma`, one rounding per step), whatever the tiling, so a
 * tensor-parallel shard and the dense model compute bit-identical dot products over the same
 * `k` range.
 *
 * With `--add-modules jdk.incubator.vector` the main loop keeps a 4-row by 2-vector tile of `c` in
 * registers; without the module a scalar loop computes the same values. Pure functions of their
 * arguments; safe to call from any thread on distinct outputs.
 */
public object MatMul {
    private val VECTOR: Boolean = ModuleLayer.boot().findModule("jdk.incubator.vector").isPresent &&
        runCatching { VectorTile.lanes() > 1 }.getOrDefault(false)

    /** True when the Vector API kernel is in use. */
    public val vectorized: Boolean get() = VECTOR

    /**
     * `c[m, n] = a[m, k] * b[k, n]` (c's rows overwritten), reading [a] from row [aRow] and
     * writing [c] from row [cRow], so a block of rows can be computed alone.
     */
    public fun mm(a: FloatArray, b: FloatArray, c: FloatArray, m: Int, k: Int, n: Int, aRow: Int = 0, cRow: Int = 0) {
        require(a.size >= (aRow + m) * k && b.size >= k * n && c.size >= (cRow + m) * n) { "mm: arrays too small for ${m}x${k} * ${k}x$n" }
        var i0 = 0
        var j0 = 0
        if (VECTOR) {
            val done = VectorTile.mm(a, b, c, m, k, n, aRow, cRow)
            i0 = done.first
            j0 = done.second
        }
        // Columns [j0, n) of rows [0, i0), then every column of rows [i0, m).
        scalar(a, b, c, 0, i0, j0, n, k, n, aRow, cRow)
        scalar(a, b, c, i0, m, 0, n, k, n, aRow, cRow)
    }

    private fun scalar(a: FloatArray, b: FloatArray, c: FloatArray, i0: Int, i1: Int, j0: Int, j1: Int, k: Int, n: Int, aRow: Int, cRow: Int) {
        if (j0 >= j1) return
        for (i in i0 until i1) {
            val ai = (aRow + i) * k
            val ci = (cRow + i) * n
            c.fill(0f, ci + j0, ci + j1)
            for (kk in 0 until k) {
                val av = a[ai + kk]
                val bk = kk * n
                for (j in j0 until j1) c[ci + j] = Math.fma(av, b[bk + j], c[ci + j])
            }
        }
    }

    /** `c[k, n] = a[m, k]^T * b[m, n]` (c is overwritten): weight gradients. */
    public fun mmTransA(a: FloatArray, b: FloatArray, c: FloatArray, m: Int, k: Int, n: Int) {
        require(a.size >= m * k && b.size >= m * n && c.size >= k * n) { "mmTransA: arrays too small" }
        val at = FloatArray(k * m)
        transpose(a, at, m, k)
        mm(at, b, c, k, m, n)
    }

    /** `c[m, n] = a[m, k] * b[n, k]^T` (c is overwritten): input gradients. Transposes [b] into [scratch] (size >= k*n) first. */
    public fun mmTransB(a: FloatArray, b: FloatArray, c: FloatArray, m: Int, k: Int, n: Int, scratch: FloatArray = FloatArray(k * n)) {
        require(b.size >= n * k && scratch.size >= k * n) { "mmTransB: arrays too small" }
        transpose(b, scratch, n, k)
        mm(a, scratch, c, m, k, n)
    }

    /** `t[c, r] = x[r, c]` for an `r x c` matrix [x]. */
    public fun transpose(x: FloatArray, t: FloatArray, rows: Int, cols: Int) {
        val blk = 32
        var r0 = 0
        while (r0 < rows) {
            val r1 = minOf(rows, r0 + blk)
            var c0 = 0
            while (c0 < cols) {
                val c1 = minOf(cols, c0 + blk)
                for (r in r0 until r1) {
                    val xr = r * cols
                    for (c in c0 until c1) t[c * rows + r] = x[xr + c]
                }
                c0 = c1
            }
            r0 = r1
        }
    }

    /** Columns `[c0, c0 + w)` of the `rows x cols` matrix [src], as a new `rows x w` matrix. */
    public fun columns(src: FloatArray, rows: Int, cols: Int, c0: Int, w: Int): FloatArray {
        val out = FloatArray(rows * w)
        for (r in 0 until rows) System.arraycopy(src, r * cols + c0, out, r * w, w)
        return out
    }

    /** Writes the `rows x w` matrix [part] into columns `[c0, c0 + w)` of the `rows x cols` matrix [dst]. */
    public fun putColumns(dst: FloatArray, rows: Int, cols: Int, c0: Int, part: FloatArray, w: Int) {
        for (r in 0 until rows) System.arraycopy(part, r * w, dst, r * cols + c0, w)
    }
}

/** The Vector API tile kernel; loaded only when the incubator module is present. */
private object VectorTile {
    private val S: VectorSpecies<Float> = FloatVector.SPECIES_PREFERRED

    fun lanes(): Int = S.length()

    /** Computes rows `[0, i1)` x columns `[0, j1)` of `c` with 4 x 2-vector tiles; returns (i1, j1). */
    fun mm(a: FloatArray, b: FloatArray, c: FloatArray, m: Int, k: Int, n: Int, aRow: Int, cRow: Int): Pair<Int, Int> {
        val l = S.length()
        val i1 = m / 4 * 4
        val j1 = n / (2 * l) * (2 * l)
        var i = 0
        while (i < i1) {
            val a0 = (aRow + i) * k
            val a1 = a0 + k
            val a2 = a1 + k
            val a3 = a2 + k
            val c0 = (cRow + i) * n
            var j = 0
            while (j < j1) {
                var x00 = FloatVector.zero(S); var x01 = FloatVector.zero(S)
                var x10 = FloatVector.zero(S); var x11 = FloatVector.zero(S)
                var x20 = FloatVector.zero(S); var x21 = FloatVector.zero(S)
                var x30 = FloatVector.zero(S); var x31 = FloatVector.zero(S)
                var bk = j
                for (kk in 0 until k) {
                    val b0 = FloatVector.fromArray(S, b, bk)
                    val b1 = FloatVector.fromArray(S, b, bk + l)
                    val v0 = FloatVector.broadcast(S, a[a0 + kk]); val v1 = FloatVector.broadcast(S, a[a1 + kk])
                    val v2 = FloatVector.broadcast(S, a[a2 + kk]); val v3 = FloatVector.broadcast(S, a[a3 + kk])
                    x00 = b0.fma(v0, x00); x01 = b1.fma(v0, x01)
                    x10 = b0.fma(v1, x10); x11 = b1.fma(v1, x11)
                    x20 = b0.fma(v2, x20); x21 = b1.fma(v2, x21)
                    x30 = b0.fma(v3, x30); x31 = b1.fma(v3, x31)
                    bk += n
                }
                x00.intoArray(c, c0 + j); x01.intoArray(c, c0 + j + l)
                x10.intoArray(c, c0 + n + j); x11.intoArray(c, c0 + n + j + l)
                x20.intoArray(c, c0 + 2 * n + j); x21.intoArray(c, c0 + 2 * n + j + l)
                x30.intoArray(c, c0 + 3 * n + j); x31.intoArray(c, c0 + 3 * n + j + l)
                j += 2 * l
            }
            i += 4
        }
        return i1 to j1
    }
}
