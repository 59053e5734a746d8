package dev.tpcomm.engine

import dev.tpcomm.DType
import dev.tpcomm.Float8
import dev.tpcomm.HalfPrecision
import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.ReduceOp
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.math.BigDecimal

/**
 * The local kernel of the reproducible reductions: for each element, the **correctly rounded**
 * (round to nearest, ties to even) sum of `n` floating-point values, or their average (the exact
 * sum divided by `n`, rounded once). The result depends only on the multiset of the values, never
 * on their order, how they were split into chunks, or how many there are beside zeros, so every
 * rank, world size, backend and algorithm that feeds it the same values gets the same bits.
 *
 * Method, per element: the values are widened to `double` (exactly). A running double sum whose
 * every step is checked with an error-free transformation (Knuth's TwoSum) is the fast path: when
 * no step rounded, the double is the exact sum, rounded once to the dtype. Otherwise (cancellation,
 * huge dynamic range, any Float64 sum that is not exact) Shewchuk's expansion (the partials of
 * Python's `math.fsum`) holds the exact sum as non-overlapping doubles, rounded once to the dtype;
 * a narrower dtype's tie is decided by the sign of the expansion's remainder. A Float64 sum whose
 * partials would overflow, and a Float64 average of a world size that is not a power of two,
 * decide with `BigDecimal` (exact). Float16, BFloat16 and FP8 values and sums are exact in
 * `double`; Float32 sums are exact in `double` unless the values' exponents span more than about
 * 2^27, which only adversarial data does.
 *
 * Special values: a NaN among the values, or both infinities, give the dtype's canonical quiet NaN
 * (positive: Float32 `0x7FC00000`, Float64 `0x7FF8000000000000`, Float16 `0x7E00`, BFloat16
 * `0x7FC0`, E4M3 `0x7F`, E5M2 `0x7E`); one kind of infinity gives that infinity; finite values whose
 * exact sum rounds beyond the dtype's largest finite value give the infinity of its sign (IEEE 754
 * overflow), except FP8, which saturates to its largest finite value as every FP8 conversion of the
 * library does (E4M3 has no infinity). An exact zero is -0 when every value is -0, else +0 (what
 * IEEE 754 round-to-nearest additions give in any order); subnormal values and results are exact.
 *
 * Thread-safe: the scratch is per thread.
 */
@InternalTpcommApi
public object ExactSum {
    /**
     * Reduces [count] elements: element `k` is the sum (or, [average], the average) of
     * `rows[j * rowStride + from + k]` for `j` in `0 until n`, written to `out[outFrom + k]`.
     * [out] may be [rows] itself when each output element is one of its own inputs (row 0, say): every
     * input of an element is read before the element is written.
     */
    @JvmStatic
    public fun reduceRows(dtype: DType, average: Boolean, n: Int, rows: MemorySegment, rowStride: Long, from: Long, count: Long, out: MemorySegment, outFrom: Long) {
        require(n >= 1) { "ExactSum: at least one row" }
        val es = dtype.byteSize.toLong()
        val ins = arrayOfNulls<MemorySegment>(n)
        for (j in 0 until n) ins[j] = rows.asSlice(j * rowStride * es)
        reduceSegments(dtype, average, n, ins, from, arrayOf(out), 1, outFrom, count)
    }

    /**
     * Reduces [count] elements of each segment of [ins] (one row each, from offset 0) into [out]
     * (from offset 0): as [reduceRows], the rows in separate segments. [out] may be one of [ins].
     */
    @JvmStatic
    public fun reduceSegments(dtype: DType, average: Boolean, ins: Array<MemorySegment?>, out: MemorySegment, count: Long) {
        reduceSegments(dtype, average, ins.size, ins, 0, arrayOf(out), 1, 0, count)
    }

    /**
     * Reduces [count] elements of the [n] segments [ins]: element `k` is the sum (or, [average], the
     * average) of `ins[j][inFrom + k]` for `j` in `0 until n`, written to `outs[i][outFrom + k]` for
     * each `i` in `0 until nOuts` (offsets in elements). An output may be one of the inputs: every
     * input of an element is read before the element is written. The in-process backend's exact
     * reduction reads the ranks' tensors straight through it ([ExactReduction]).
     */
    internal fun reduceSegments(dtype: DType, average: Boolean, n: Int, ins: Array<MemorySegment?>, inFrom: Long, outs: Array<MemorySegment?>, nOuts: Int, outFrom: Long, count: Long) {
        require(n >= 1) { "ExactSum: at least one row" }
        if (dtype == DType.Float32 && (!average || Integer.bitCount(n) == 1)) return float32Segments(average, n, ins, inFrom, outs, nOuts, outFrom, count)
        val f = Format.of(dtype)
        val s = scratch.get().ensure(n)
        val v = s.values
        val es = dtype.byteSize.toLong()
        for (k in 0 until count) {
            for (j in 0 until n) v[j] = read(dtype, ins[j]!!, (inFrom + k) * es)
            val r = if (average) f.average(v, n, s) else f.sum(v, n, s)
            for (i in 0 until nOuts) write(dtype, outs[i]!!, (outFrom + k) * es, r)
        }
    }

    /** Whether [ExactFloat32Lanes] runs: `jdk.incubator.vector` present, `-Dtpcomm.local.vector` not false. */
    private val lanes: Boolean = try {
        ModuleLayer.boot().findModule("jdk.incubator.vector").isPresent &&
            System.getProperty("tpcomm.local.vector", "true") != "false" && ExactFloat32Lanes.usable
    } catch (_: Throwable) {
        false
    }

    /**
     * Float32 sums (and averages over a power-of-two [n]): blocks of lanes through [ExactFloat32Lanes]
     * where the Vector API is present (sums certified exact by their exponent range), the rest (a group
     * with an element not certified, the tail)
     * element by element: a double running sum checked with TwoSum; exact, it rounds once with
     * `toFloat`, IEEE's rounding to float32, subnormals and overflow included; an element whose sum
     * rounded, or holds a NaN or an infinity, goes the general way.
     */
    private fun float32Segments(average: Boolean, n: Int, ins: Array<MemorySegment?>, inFrom: Long, outs: Array<MemorySegment?>, nOuts: Int, outFrom: Long, count: Long) {
        var k = 0L
        if (lanes) {
            val g = ExactFloat32Lanes.lanes
            val sc = scratch.get().ensure(n)
            while (k + g <= count) {
                val len = minOf(ExactFloat32Lanes.BLOCK.toLong(), (count - k) / g * g).toInt()
                val fails = ExactFloat32Lanes.block(average, n, ins, inFrom, outs, nOuts, outFrom, k, len, sc.acc, sc.hi, sc.lo, sc.failed)
                for (f in 0 until fails) float32Elements(average, n, ins, inFrom, outs, nOuts, outFrom, sc.failed[f], sc.failed[f] + g)
                k += len
            }
        }
        float32Elements(average, n, ins, inFrom, outs, nOuts, outFrom, k, count)
    }

    /** [float32Segments]' scalar path for elements `[from, to)`. */
    private fun float32Elements(average: Boolean, n: Int, ins: Array<MemorySegment?>, inFrom: Long, outs: Array<MemorySegment?>, nOuts: Int, outFrom: Long, from: Long, to: Long) {
        if (from >= to) return
        val s = scratch.get().ensure(n)
        val v = s.values
        val f = Format.of(DType.Float32)
        for (k in from until to) {
            val at = (inFrom + k) * 4
            var acc = ins[0]!!.get(F32, at).toDouble()
            var exact = true
            for (j in 1 until n) {
                val x = ins[j]!!.get(F32, at).toDouble()
                val t = acc + x
                val bp = t - acc
                if ((acc - (t - bp)) + (x - bp) != 0.0) exact = false
                acc = t
            }
            val r = if (exact && !acc.isNaN() && !acc.isInfinite()) {
                (if (average) acc / n else acc).toFloat()
            } else {
                for (j in 0 until n) v[j] = ins[j]!!.get(F32, at).toDouble()
                val d = if (average) f.average(v, n, s) else f.sum(v, n, s)
                if (d.isNaN()) java.lang.Float.intBitsToFloat(0x7FC00000) else d.toFloat()
            }
            val o = (outFrom + k) * 4
            for (i in 0 until nOuts) outs[i]!!.set(F32, o, r)
        }
    }

    /**
     * The correctly rounded sum of [values] in [dtype] (each value must be one of the dtype's: tests
     * and tools), as a double holding the dtype's value (NaN, infinities and -0 included).
     */
    @JvmStatic
    public fun sum(dtype: DType, values: DoubleArray): Double = stored(dtype, Format.of(dtype).sum(values.copyOf(), values.size, Scratch().ensure(values.size)))

    /** As [sum], the exact sum divided by the number of [values], rounded once. */
    @JvmStatic
    public fun average(dtype: DType, values: DoubleArray): Double = stored(dtype, Format.of(dtype).average(values.copyOf(), values.size, Scratch().ensure(values.size)))

    /** [r] as the dtype stores it (an overflow becomes the infinity, or FP8's saturation). */
    private fun stored(dtype: DType, r: Double): Double {
        val s = MemorySegment.ofArray(LongArray(1))
        write(dtype, s, 0, r)
        return read(dtype, s, 0)
    }

    /**
     * [value] (one of [dtype]'s) times [factor] rounded once to [dtype] (the product is exact in a
     * double for the narrow dtypes; a Float64 product is IEEE's): the per-rank scaling of
     * [ReduceOp.PreMulSum] in the reproducible mode. [factor] is [ReduceOp.PreMulSum.factorIn] of the dtype.
     */
    @JvmStatic
    public fun scale(dtype: DType, value: Double, factor: Double): Double = Format.of(dtype).finish(value * factor, 0)

    /** Scales [count] elements of [src] by [op]'s factor into [dst] (both from offset 0), each product rounded once to [dtype]. */
    @JvmStatic
    public fun scaleInto(dtype: DType, op: ReduceOp.PreMulSum, src: MemorySegment, dst: MemorySegment, count: Long) {
        val f = Format.of(dtype)
        val factor = op.factorIn(dtype)
        val es = dtype.byteSize.toLong()
        for (k in 0 until count) {
            val x = read(dtype, src, k * es)
            write(dtype, dst, k * es, if (x.isNaN()) Double.NaN else f.finish(x * factor, 0))
        }
    }

    /** Whether [dtype] is one this kernel reduces (the floating-point types). */
    @JvmStatic
    public fun supports(dtype: DType): Boolean = dtype.isFloatingPoint

    // ------------------------------------------------------------------ element access

    private val F32 = ValueLayout.JAVA_FLOAT_UNALIGNED
    private val F64 = ValueLayout.JAVA_DOUBLE_UNALIGNED
    private val I16 = ValueLayout.JAVA_SHORT_UNALIGNED

    private fun read(dtype: DType, s: MemorySegment, at: Long): Double = when (dtype) {
        DType.Float32 -> s.get(F32, at).toDouble()
        DType.Float64 -> s.get(F64, at)
        DType.Float16 -> HalfPrecision.float16ToFloat(s.get(I16, at)).toDouble()
        DType.BFloat16 -> HalfPrecision.bfloat16ToFloat(s.get(I16, at)).toDouble()
        DType.Float8E4M3, DType.Float8E5M2 -> Float8.toFloat(dtype, s.get(ValueLayout.JAVA_BYTE, at)).toDouble()
        else -> throw IllegalArgumentException("reproducible reductions take floating-point dtypes, not $dtype")
    }

    /** Writes [r], a value of [dtype] already rounded to it (or NaN, an infinity). */
    private fun write(dtype: DType, s: MemorySegment, at: Long, r: Double) {
        when (dtype) {
            DType.Float32 -> s.set(F32, at, if (r.isNaN()) java.lang.Float.intBitsToFloat(0x7FC00000) else r.toFloat())
            DType.Float64 -> s.set(F64, at, if (r.isNaN()) Double.NaN else r)
            DType.Float16 -> s.set(I16, at, if (r.isNaN()) 0x7E00.toShort() else HalfPrecision.floatToFloat16(r.toFloat()))
            DType.BFloat16 -> s.set(I16, at, if (r.isNaN()) 0x7FC0.toShort() else HalfPrecision.floatToBFloat16(r.toFloat()))
            DType.Float8E4M3 -> s.set(ValueLayout.JAVA_BYTE, at, if (r.isNaN()) 0x7F else Float8.toE4M3(r))
            DType.Float8E5M2 -> s.set(ValueLayout.JAVA_BYTE, at, if (r.isNaN()) 0x7E else Float8.toE5M2(r))
            else -> throw IllegalArgumentException("reproducible reductions take floating-point dtypes, not $dtype")
        }
    }

    // ------------------------------------------------------------------ scratch

    private class Scratch {
        var values = DoubleArray(8)
        var partials = DoubleArray(16)
        var extra = DoubleArray(20)
        val acc = DoubleArray(ExactFloat32Lanes.BLOCK)
        val hi = IntArray(ExactFloat32Lanes.BLOCK)
        val lo = IntArray(ExactFloat32Lanes.BLOCK)
        val failed = LongArray(ExactFloat32Lanes.BLOCK)
        fun ensure(n: Int): Scratch {
            if (values.size < n) values = DoubleArray(n)
            if (partials.size < n + 2) partials = DoubleArray(n + 2)
            if (extra.size < n + 6) extra = DoubleArray(n + 6)
            return this
        }
    }

    private val scratch = ThreadLocal.withInitial { Scratch() }

    /** How close (relative) to a tie a quotient within 2^-51 of the exact average is decided exactly. */
    private val NEAR_TIE = Math.scalb(1.0, -40)

    // ------------------------------------------------------------------ exact arithmetic

    /**
     * Shewchuk's grow-expansion over `v[0 until n]` (all finite) into `p`: non-overlapping partials,
     * increasing in magnitude, whose exact sum is the values' exact sum. Returns how many, or -1
     * when a partial overflowed (only Float64 values near its largest can).
     */
    private fun expansion(v: DoubleArray, n: Int, p: DoubleArray): Int {
        var m = 0
        for (idx in 0 until n) {
            var x = v[idx]
            var i = 0
            for (k in 0 until m) {
                var y = p[k]
                if (Math.abs(x) < Math.abs(y)) { val t = x; x = y; y = t }
                val hi = x + y
                val lo = y - (hi - x)
                if (lo != 0.0) p[i++] = lo
                x = hi
            }
            if (!x.isFinite()) return -1
            p[i] = x
            m = i + 1
        }
        return m
    }

    /** `math.fsum`'s correctly rounded double of the expansion `p[0 until m]` (round to nearest even). */
    private fun roundExpansion(p: DoubleArray, m: Int): Double {
        if (m == 0) return 0.0
        var n = m - 1
        var hi = p[n]
        var lo = 0.0
        while (n > 0) {
            val x = hi
            n--
            val y = p[n]
            hi = x + y
            val yr = hi - x
            lo = y - yr
            if (lo != 0.0) break
        }
        if (n > 0 && ((lo < 0.0 && p[n - 1] < 0.0) || (lo > 0.0 && p[n - 1] > 0.0))) {
            val y = lo * 2.0
            val x = hi + y
            val yr = x - hi
            if (y == yr) hi = x
        }
        return hi
    }

    /** The sign (-1, 0, 1) of the exact `sum(p[0 until m]) - d`, computed exactly. */
    private fun remainderSign(p: DoubleArray, m: Int, d: Double, s: Scratch): Int {
        val w = s.extra
        for (i in 0 until m) w[i] = p[i]
        w[m] = -d
        val q = DoubleArray(m + 2)
        val k = expansion(w, m + 1, q)
        if (k < 0) return exactRemainderSign(p, m, d)
        for (i in k - 1 downTo 0) if (q[i] != 0.0) return if (q[i] > 0) 1 else -1
        return 0
    }

    private fun exactRemainderSign(p: DoubleArray, m: Int, d: Double): Int {
        var acc = BigDecimal.ZERO
        for (i in 0 until m) acc = acc.add(BigDecimal(p[i]))
        return acc.subtract(BigDecimal(d)).signum()
    }

    private fun exactSum(v: DoubleArray, n: Int): BigDecimal {
        var acc = BigDecimal.ZERO
        for (i in 0 until n) acc = acc.add(BigDecimal(v[i]))
        return acc
    }

    /**
     * NaN, an infinity, or null when every value is finite: any NaN or both infinities give NaN, else
     * the one infinity.
     */
    private fun special(v: DoubleArray, n: Int): Double? {
        var pos = false
        var neg = false
        for (i in 0 until n) {
            val x = v[i]
            if (x.isNaN()) return Double.NaN
            if (x == Double.POSITIVE_INFINITY) pos = true
            if (x == Double.NEGATIVE_INFINITY) neg = true
        }
        return when {
            pos && neg -> Double.NaN
            pos -> Double.POSITIVE_INFINITY
            neg -> Double.NEGATIVE_INFINITY
            else -> null
        }
    }

    // ------------------------------------------------------------------ formats

    /**
     * A dtype's rounding: [precision] significant bits, smallest normal exponent [minExponent];
     * [finish] rounds an exact (or, with a nonzero tie hint, nearly exact) double to it.
     */
    private abstract class Format(val dtype: DType, val precision: Int, val minExponent: Int) {
        /**
         * Rounds [x] to this format, to nearest, ties to even; when [x] is exactly halfway between
         * two values of the format and [tie] is nonzero, the exact value lies above (1) or below (-1)
         * [x] in magnitude, and decides.
         */
        open fun finish(x: Double, tie: Int): Double {
            if (x == 0.0 || !x.isFinite()) return x
            val a = Math.abs(x)
            val qe = maxOf(Math.getExponent(a), minExponent) - precision + 1
            val scaled = Math.scalb(a, -qe) // exact: a power-of-two scaling within double's normal range
            val t = Math.floor(scaled)
            val frac = scaled - t
            val up = when {
                frac > 0.5 -> true
                frac < 0.5 -> false
                tie > 0 -> true
                tie < 0 -> false
                else -> (t % 2.0) != 0.0
            }
            val r = Math.scalb(if (up) t + 1.0 else t, qe)
            return Math.copySign(r, x)
        }

        /**
         * Whether the halfway point between two of this format's values lies within [relative] of
         * [x]: where a double that is not exact may round the other way.
         */
        fun nearTie(x: Double, relative: Double): Boolean {
            if (x == 0.0 || !x.isFinite()) return false
            val a = Math.abs(x)
            val qe = maxOf(Math.getExponent(a), minExponent) - precision + 1
            val scaled = Math.scalb(a, -qe)
            val frac = scaled - Math.floor(scaled)
            return Math.abs(frac - 0.5) <= relative * scaled + 1e-300
        }

        /** The halfway point nearest [x] (in magnitude, signed as [x]) between two values of this format. */
        fun tieNear(x: Double): Double {
            val a = Math.abs(x)
            val qe = maxOf(Math.getExponent(a), minExponent) - precision + 1
            val t = Math.floor(Math.scalb(a, -qe))
            return Math.copySign(Math.scalb(t + 0.5, qe), x)
        }

        fun sum(v: DoubleArray, n: Int, s: Scratch): Double {
            // Fast path: a double running sum, each step checked with TwoSum.
            var acc = v[0]
            var exact = true
            for (i in 1 until n) {
                val x = v[i]
                val t = acc + x
                val bp = t - acc
                val err = (acc - (t - bp)) + (x - bp)
                if (err != 0.0) exact = false
                acc = t
            }
            if (!acc.isFinite()) special(v, n)?.let { return it }
            if (exact && acc.isFinite()) return finish(acc, 0)
            return sumSlow(v, n, s)
        }

        /** The exact sum of finite values that a double running sum could not hold, rounded once. */
        open fun sumSlow(v: DoubleArray, n: Int, s: Scratch): Double {
            val p = s.partials
            val m = expansion(v, n, p)
            check(m >= 0) { "unreachable: $dtype values cannot overflow a double" }
            val hi = roundExpansion(p, m)
            if (!tieOf(hi)) return finish(hi, 0)
            return finish(hi, remainderSignOf(p, m, hi, s, hi))
        }

        /** Whether [hi] is exactly halfway between two values of this format. */
        fun tieOf(hi: Double): Boolean {
            if (hi == 0.0 || !hi.isFinite()) return false
            val a = Math.abs(hi)
            val qe = maxOf(Math.getExponent(a), minExponent) - precision + 1
            val scaled = Math.scalb(a, -qe)
            return scaled - Math.floor(scaled) == 0.5
        }

        /** +1 when the exact value exceeds [hi] in magnitude, -1 below, 0 equal (by its sign against [sign]'s). */
        fun remainderSignOf(p: DoubleArray, m: Int, hi: Double, s: Scratch, sign: Double): Int {
            val r = remainderSign(p, m, hi, s)
            return if (sign > 0) r else -r
        }

        /** The exact sum divided by [n], rounded once. */
        open fun average(v: DoubleArray, n: Int, s: Scratch): Double {
            if (n == 1) return finish(v[0], 0)
            special(v, n)?.let { return it }
            val p = s.partials
            val m = expansion(v, n, p)
            val hd = roundExpansion(p, m) // the exact sum's double (these dtypes cannot overflow one)
            if (hd == 0.0) return sumZeroSign(v, n)
            // Within 2^-52 (relative) of the exact average: only a quotient near a tie needs more.
            val q = hd / n
            if (!nearTie(q, NEAR_TIE)) return finish(q, 0)
            return averageExact(v, n)
        }

        /** The average decided exactly: the exact sum against n times the tie nearest the quotient. */
        fun averageExact(v: DoubleArray, n: Int): Double {
            val exact = exactSum(v, n)
            if (exact.signum() == 0) return sumZeroSign(v, n)
            val q = exact.divide(BigDecimal(n), java.math.MathContext(40)).toDouble()
            val mid = tieNear(q)
            val c = exact.abs().compareTo(BigDecimal(Math.abs(mid)).multiply(BigDecimal(n)))
            return finish(mid, c)
        }

        companion object {
            fun of(dtype: DType): Format = when (dtype) {
                DType.Float32 -> FLOAT32
                DType.Float64 -> FLOAT64
                DType.Float16 -> FLOAT16
                DType.BFloat16 -> BFLOAT16
                DType.Float8E4M3 -> E4M3
                DType.Float8E5M2 -> E5M2
                else -> throw IllegalArgumentException("reproducible reductions take floating-point dtypes, not $dtype")
            }

            private val FLOAT32 = object : Format(DType.Float32, 24, -126) {}
            private val FLOAT16 = object : Format(DType.Float16, 11, -14) {}
            private val BFLOAT16 = object : Format(DType.BFloat16, 8, -126) {}
            private val E4M3 = object : Format(DType.Float8E4M3, 4, -6) {}
            private val E5M2 = object : Format(DType.Float8E5M2, 3, -14) {}
            private val FLOAT64 = Float64Format()
        }
    }

    /** The sign a zero sum of [v] takes: -0 when every value is -0, else +0. */
    private fun sumZeroSign(v: DoubleArray, n: Int): Double {
        for (i in 0 until n) if (v[i].toRawBits() != (-0.0).toRawBits()) return 0.0
        return -0.0
    }

    /** Float64: the double itself is the format; its exact sums need the expansion, its overflow BigDecimal. */
    private class Float64Format : Format(DType.Float64, 53, -1022) {
        override fun finish(x: Double, tie: Int): Double = x

        override fun sumSlow(v: DoubleArray, n: Int, s: Scratch): Double {
            val p = s.partials
            val m = expansion(v, n, p)
            if (m >= 0) {
                val r = roundExpansion(p, m)
                if (r.isFinite()) return r
            }
            // Partials overflowed (finite values near Double.MAX_VALUE): decide exactly.
            return exactSum(v, n).toDouble()
        }

        override fun average(v: DoubleArray, n: Int, s: Scratch): Double {
            if (n == 1) return v[0]
            special(v, n)?.let { return it }
            val total = sum(v, n, s)
            if (total == 0.0) return total // sums of doubles that round to zero are exact zeros, signed as IEEE adds
            if (Integer.bitCount(n) == 1 && total.isFinite()) {
                val q = total / n
                // Exact scaling of the correctly rounded sum unless the quotient falls below the normal range.
                if (Math.abs(q) >= java.lang.Double.MIN_NORMAL) return q
            }
            // The quotient of the rounded sum is within an ulp or two: pick the neighbour whose rounding
            // interval holds the exact average, comparing the exact sum with n times each tie (BigDecimal).
            val exact = exactSum(v, n)
            val bn = BigDecimal(n)
            var q = if (total.isFinite()) total / n else exact.divide(bn, java.math.MathContext(20)).toDouble()
            repeat(4) {
                val up = Math.nextUp(q)
                if (up.isFinite()) {
                    val c = exact.compareTo(BigDecimal(q).add(BigDecimal(up)).multiply(HALF).multiply(bn))
                    if (c > 0) { q = up; return@repeat }
                    if (c == 0) return if ((q.toRawBits() and 1L) == 0L) q else up
                }
                val down = Math.nextDown(q)
                if (down.isFinite()) {
                    val c = exact.compareTo(BigDecimal(q).add(BigDecimal(down)).multiply(HALF).multiply(bn))
                    if (c < 0) { q = down; return@repeat }
                    if (c == 0) return if ((q.toRawBits() and 1L) == 0L) q else down
                }
                return if (q == 0.0) Math.copySign(0.0, exact.signum().toDouble()) else q
            }
            return q
        }
    }

    private val HALF = BigDecimal("0.5")
}
