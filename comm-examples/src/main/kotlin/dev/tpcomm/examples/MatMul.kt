package dev.tpcomm.examples

/**
 * Small float32 matrix kernels over row-major `FloatArray`s, enough for the demo's MLP without a
 * BLAS. Loops are ordered so the innermost one is `c[i, j..] += a * b[k, j..]`, which the JIT
 * vectorizes; the summation order over `k` is fixed (ascending), so a tensor-parallel shard and
 * the dense model compute bit-identical dot products over the same `k` range.
 *
 * Pure functions of their arguments; safe to call from any thread on distinct outputs.
 */
public object MatMul {
    private const val BLOCK_K = 64
    private const val BLOCK_J = 512

    /**
     * `c[m, n] = a[m, k] * b[k, n]` (c is overwritten), reading [a] from row offset [aRow] and
     * writing [c] from row offset [cRow] (both in rows), so a block of rows can be computed alone.
     */
    public fun mm(a: FloatArray, b: FloatArray, c: FloatArray, m: Int, k: Int, n: Int, aRow: Int = 0, cRow: Int = 0) {
        require(a.size >= (aRow + m) * k && b.size >= k * n && c.size >= (cRow + m) * n) { "mm: arrays too small for ${m}x${k} * ${k}x$n" }
        c.fill(0f, cRow * n, (cRow + m) * n)
        var j0 = 0
        while (j0 < n) {
            val j1 = minOf(n, j0 + BLOCK_J)
            var k0 = 0
            while (k0 < k) {
                val k1 = minOf(k, k0 + BLOCK_K)
                for (i in 0 until m) {
                    val ci = (cRow + i) * n
                    val ai = (aRow + i) * k
                    for (kk in k0 until k1) {
                        val av = a[ai + kk]
                        val bk = kk * n
                        for (j in j0 until j1) c[ci + j] += av * b[bk + j]
                    }
                }
                k0 = k1
            }
            j0 = j1
        }
    }

    /** `c[k, n] = a[m, k]^T * b[m, n]` (c is overwritten): weight gradients. */
    public fun mmTransA(a: FloatArray, b: FloatArray, c: FloatArray, m: Int, k: Int, n: Int) {
        require(a.size >= m * k && b.size >= m * n && c.size >= k * n) { "mmTransA: arrays too small" }
        c.fill(0f, 0, k * n)
        for (r in 0 until m) {
            val ar = r * k
            val br = r * n
            for (i in 0 until k) {
                val av = a[ar + i]
                val ci = i * n
                for (j in 0 until n) c[ci + j] += av * b[br + j]
            }
        }
    }

    /** `c[m, n] = a[m, k] * b[n, k]^T` (c is overwritten): input gradients. Transposes [b] into [scratch] (size >= k*n) first. */
    public fun mmTransB(a: FloatArray, b: FloatArray, c: FloatArray, m: Int, k: Int, n: Int, scratch: FloatArray = FloatArray(k * n)) {
        require(b.size >= n * k && scratch.size >= k * n) { "mmTransB: arrays too small" }
        transpose(b, scratch, n, k)
        mm(a, scratch, c, m, k, n)
    }

    /** `t[c, r] = x[r, c]` for an `r x c` matrix [x]. */
    public fun transpose(x: FloatArray, t: FloatArray, rows: Int, cols: Int) {
        for (r in 0 until rows) {
            val xr = r * cols
            for (c in 0 until cols) t[c * rows + r] = x[xr + c]
        }
    }

    /** Column `j` of the `r x c` matrix [src] restricted to columns `[c0, c0 + w)`, as a new `r x w` matrix. */
    public fun columns(src: FloatArray, rows: Int, cols: Int, c0: Int, w: Int): FloatArray {
        val out = FloatArray(rows * w)
        for (r in 0 until rows) System.arraycopy(src, r * cols + c0, out, r * w, w)
        return out
    }

    /** Writes the `r x w` matrix [part] into columns `[c0, c0 + w)` of the `r x c` matrix [dst]. */
    public fun putColumns(dst: FloatArray, rows: Int, cols: Int, c0: Int, part: FloatArray, w: Int) {
        for (r in 0 until rows) System.arraycopy(part, r * w, dst, r * cols + c0, w)
    }
}
