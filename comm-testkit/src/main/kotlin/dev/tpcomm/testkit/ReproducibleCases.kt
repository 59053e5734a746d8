package dev.tpcomm.testkit

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.allReduceCoalesced
import dev.tpcomm.coroutines.reproducible
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import kotlin.random.Random

/**
 * The reproducible reductions (`comm.reproducible()`, `CommConfig.reproducibleReductions`):
 * every element must be the bits of [ExactReference] (exact `BigDecimal` sum, one rounding), on
 * random and adversarial inputs (cancellation, huge dynamic range, subnormals, signed zeros, NaN
 * and infinities), with the inputs assigned to ranks in a random order, on whatever world size
 * and backend runs the case. Equal to one exact reference on every world size, order and backend,
 * the results are equal to each other bit for bit.
 */
internal object ReproducibleCases {
    private fun collective(name: String, body: suspend (Communicator, CaseContext) -> Unit) =
        ConformanceCase("reproducible: $name", CaseKind.Collective, 1, { _, _ -> null }, body)

    /** Per-rank bytes past the kernels' one-gather size (16 KiB): the chunked path. */
    private const val LARGE_BYTES = 16 * 1024 + 104

    private fun floats(ctx: CaseContext, op: ReduceOp) =
        ctx.options.dtypes.filter { it.isFloatingPoint && ctx.options.performs(op, it) }.sortedBy { it.ordinal }

    private fun premul(rankIndex: Int) = ReduceOp.PreMulSum(listOf(0.5, 0.1, 3.0, -0.25, 1.0 / 3.0, 1e-3, 7.0, -1.5)[rankIndex % 8])

    val all: List<ConformanceCase> = listOf(
        collective("allReduce Sum, Avg and PreMulSum equal the exact reference bit for bit, every float dtype, adversarial inputs, ranks permuted") { comm, ctx ->
            val rc = comm.reproducible()
            for (op in listOf<ReduceOp>(ReduceOp.Sum, ReduceOp.Avg, premul(0))) for (dtype in floats(ctx, op)) {
                for (len in if (op == ReduceOp.Sum) listOf(1, 7, LARGE_BYTES / dtype.byteSize + 3) else listOf(3, LARGE_BYTES / dtype.byteSize + 3)) {
                    val w = comm.worldSize
                    val pool = Inputs.pool(ctx.random, dtype, w, len)
                    val perm = (0 until w).shuffled(ctx.random)
                    val mine = perm[comm.rank]
                    val myOp = if (op is ReduceOp.PreMulSum) premul(mine) else op
                    val t = ctx.options.placement.toBackend(Inputs.tensor(dtype, pool[mine]))
                    rc.allReduce(t, myOp)
                    val got = Inputs.bits(ctx.options.placement.toHost(t))
                    val expected = Inputs.expected(dtype, pool, (0 until w).toList(), op)
                    Inputs.compare(ctx, "allReduce $op $dtype x$len world $w perm $perm", got, expected)
                }
            }
        },
        collective("reduce to every root, reduceScatter (dim 0 and 1) and reduceScatterV equal the exact reference") { comm, ctx ->
            val rc = comm.reproducible()
            val w = comm.worldSize
            for (dtype in floats(ctx, ReduceOp.Sum)) for (op in listOf<ReduceOp>(ReduceOp.Sum, ReduceOp.Avg)) {
                if (!ctx.options.performs(op, dtype)) continue
                for (len in listOf(5, LARGE_BYTES / dtype.byteSize + 1)) {
                    val pool = Inputs.pool(ctx.random, dtype, w, len)
                    val root = ctx.random.nextInt(w)
                    val t = ctx.options.placement.toBackend(Inputs.tensor(dtype, pool[comm.rank]))
                    rc.reduce(t, root, op)
                    val got = Inputs.bits(ctx.options.placement.toHost(t))
                    if (comm.rank == root) Inputs.compare(ctx, "reduce $op $dtype x$len root $root", got, Inputs.expected(dtype, pool, (0 until w).toList(), op))
                }
                // reduceScatter along dim 0 and dim 1 of a (w*2) x 3 and a 2 x (w*3) tensor.
                for (dim in 0..1) {
                    val rows = if (dim == 0) w * 2 else 2
                    val cols = if (dim == 0) 3 else w * 3
                    val pool = Inputs.pool(ctx.random, dtype, w, rows * cols)
                    val t = ctx.options.placement.toBackend(Inputs.tensor(dtype, pool[comm.rank], rows, cols))
                    val out = rc.reduceScatter(t, op, dim)
                    val got = Inputs.bits(ctx.options.placement.toHost(out))
                    val full = Inputs.expected(dtype, pool, (0 until w).toList(), op)
                    val expected = if (dim == 0) full.copyOfRange(comm.rank * 2 * cols, (comm.rank + 1) * 2 * cols)
                    else LongArray(2 * 3) { k -> full[(k / 3) * cols + comm.rank * 3 + k % 3] }
                    Inputs.compare(ctx, "reduceScatter $op $dtype dim $dim", got, expected)
                }
                val sizes = List(w) { ctx.random.nextInt(0, 4) }
                val total = sizes.sum()
                val pool = Inputs.pool(ctx.random, dtype, w, total * 2)
                val t = ctx.options.placement.toBackend(Inputs.tensor(dtype, pool[comm.rank], total, 2))
                val out = rc.reduceScatterV(t, sizes, op)
                val from = sizes.take(comm.rank).sum() * 2
                val full = Inputs.expected(dtype, pool, (0 until w).toList(), op)
                Inputs.compare(ctx, "reduceScatterV $op $dtype sizes $sizes", Inputs.bits(ctx.options.placement.toHost(out)), full.copyOfRange(from, from + sizes[comm.rank] * 2))
            }
        },
        collective("fused and split calls give the bits of one call; ranks past k contributing -0 (the identity) give the k-input reference") { comm, ctx ->
            val rc = comm.reproducible()
            val w = comm.worldSize
            for (dtype in floats(ctx, ReduceOp.Sum)) {
                val len = 4000 / dtype.byteSize + 11
                val k = maxOf(1, (w + 1) / 2)
                val pool = Inputs.pool(ctx.random, dtype, k, len)
                val zero = LongArray(len) { Inputs.signedZero(dtype, true) } // -0: x + (-0) is x for every x, -0 included
                val mineBits = if (comm.rank < k) pool[comm.rank] else zero
                val whole = ctx.options.placement.toBackend(Inputs.tensor(dtype, mineBits))
                rc.allReduce(whole)
                val expected = Inputs.expected(dtype, pool, (0 until k).toList(), ReduceOp.Sum)
                Inputs.compare(ctx, "allReduce $dtype x$len, $k inputs in a world of $w", Inputs.bits(ctx.options.placement.toHost(whole)), expected)
                // The same tensor in three pieces, fused into one bucket and split into three.
                val cuts = listOf(0, len / 3, len / 3 + 17, len)
                for (threshold in listOf(1L shl 20, 1L)) {
                    val parts = (0 until 3).map { i -> ctx.options.placement.toBackend(Inputs.tensor(dtype, mineBits.copyOfRange(cuts[i], cuts[i + 1]))) }
                    rc.allReduceCoalesced(parts, ReduceOp.Sum, threshold)
                    val got = parts.map { Inputs.bits(ctx.options.placement.toHost(it)) }.reduce { a, b -> a + b }
                    Inputs.compare(ctx, "allReduceCoalesced $dtype threshold $threshold", got, expected)
                }
            }
        },
        ConformanceCase(
            "failure: mismatched reduction mode (reproducible on rank 0, default on the others)", CaseKind.Failure, 2,
            { o, _ -> if (!o.checksConsistency) "the backend does not check consistency" else null },
        ) { comm, ctx ->
            val t = ctx.options.placement.toBackend(Tensor.of(floatArrayOf(1f, 2f)))
            val r = attempt { comm.reproducible(comm.rank == 0).allReduce(t) }
            expectFailure(ctx, "allReduce, reproducible on rank 0 only, on rank ${comm.rank}", r, ctx.options.failureTimeout, "CollectiveMismatchException") {
                it is dev.tpcomm.CollectiveMismatchException
            }
        },
    )

    /** Inputs as bit patterns of a dtype, the tensors holding them, and the reference. */
    internal object Inputs {
        /** [count] contributions of [len] elements, each element's [count] values drawn together from one of several adversarial kinds. */
        fun pool(random: Random, dtype: DType, count: Int, len: Int): List<LongArray> {
            val out = List(count) { LongArray(len) }
            val specials = random.nextInt(4) == 0
            for (i in 0 until len) {
                val kind = random.nextInt(if (specials) 7 else 6)
                for (j in 0 until count) out[j][i] = when (kind) {
                    0 -> finiteBits(random, dtype) // any exponent: huge dynamic range, subnormals
                    1 -> moderate(random, dtype) // ordinary values of one scale
                    2 -> if (j % 2 == 1) negate(dtype, out[j - 1][i]) else finiteBits(random, dtype) // exact cancellation
                    3 -> if (j == 0) largest(dtype, random.nextBoolean()) else subnormal(random, dtype) // overflow and underflow at once
                    4 -> signedZero(dtype, random.nextInt(3) != 0 || j == 0) // all -0, or a mix
                    5 -> if (j == 0) moderate(random, dtype) else if (j % 2 == 1) negate(dtype, out[j - 1][i]) else moderate(random, dtype)
                    else -> specialBits(random, dtype)
                }
            }
            return out
        }

        private fun width(dtype: DType) = dtype.byteSize * 8

        private fun mask(dtype: DType) = if (dtype.byteSize == 8) -1L else (1L shl width(dtype)) - 1

        private fun isFinite(dtype: DType, bits: Long) = ExactReference.valueOf(dtype, bits).isFinite()

        fun finiteBits(random: Random, dtype: DType): Long {
            while (true) {
                val b = random.nextLong() and mask(dtype)
                if (isFinite(dtype, b)) return b
            }
        }

        fun moderate(random: Random, dtype: DType): Long = ExactReference.bitsOf(dtype, ExactReference.round(dtype, java.math.BigDecimal(random.nextDouble(-4.0, 4.0)), 1))

        fun negate(dtype: DType, bits: Long): Long = bits xor (1L shl (width(dtype) - 1))

        fun largest(dtype: DType, negative: Boolean): Long {
            val max = when (dtype) {
                DType.Float32 -> Float.MAX_VALUE.toDouble()
                DType.Float64 -> Double.MAX_VALUE
                DType.Float16 -> 65504.0
                DType.BFloat16 -> ExactReference.valueOf(DType.BFloat16, 0x7F7F)
                DType.Float8E4M3 -> 448.0
                else -> 57344.0
            }
            return ExactReference.bitsOf(dtype, if (negative) -max else max)
        }

        fun subnormal(random: Random, dtype: DType): Long {
            val mantissaBits = when (dtype) { DType.Float32 -> 23; DType.Float64 -> 52; DType.Float16 -> 10; DType.BFloat16 -> 7; DType.Float8E4M3 -> 3; else -> 2 }
            val m = (random.nextLong() and ((1L shl mantissaBits) - 1)).coerceAtLeast(1)
            return if (random.nextBoolean()) m else negate(dtype, m)
        }

        fun signedZero(dtype: DType, negative: Boolean): Long = if (negative) negate(dtype, 0) else 0L

        fun specialBits(random: Random, dtype: DType): Long = when (random.nextInt(4)) {
            0 -> ExactReference.nanBits(dtype) or (if (random.nextBoolean()) 1L shl (width(dtype) - 1) else 0L) // either sign of NaN
            1 -> if (dtype == DType.Float8E4M3) ExactReference.nanBits(dtype) else ExactReference.bitsOf(dtype, Double.POSITIVE_INFINITY)
            2 -> if (dtype == DType.Float8E4M3) finiteBits(random, dtype) else ExactReference.bitsOf(dtype, Double.NEGATIVE_INFINITY)
            else -> finiteBits(random, dtype)
        }

        /** A host tensor of [dtype] holding [bits] (shape [shape], or one dimension). */
        fun tensor(dtype: DType, bits: LongArray, vararg shape: Int): Tensor {
            val t = if (shape.isEmpty()) Tensor.zeros(dtype, bits.size) else Tensor.zeros(dtype, *shape)
            val s = t.segment
            for (i in bits.indices) put(dtype, s, i.toLong(), bits[i])
            return t
        }

        fun bits(t: Tensor): LongArray = LongArray(Math.toIntExact(t.numel)) { i -> get(t.dtype, t.segment, i.toLong()) }

        private fun put(dtype: DType, s: MemorySegment, i: Long, b: Long) = when (dtype.byteSize) {
            8 -> s.set(ValueLayout.JAVA_LONG_UNALIGNED, i * 8, b)
            4 -> s.set(ValueLayout.JAVA_INT_UNALIGNED, i * 4, b.toInt())
            2 -> s.set(ValueLayout.JAVA_SHORT_UNALIGNED, i * 2, b.toShort())
            else -> s.set(ValueLayout.JAVA_BYTE, i, b.toByte())
        }

        private fun get(dtype: DType, s: MemorySegment, i: Long): Long = when (dtype.byteSize) {
            8 -> s.get(ValueLayout.JAVA_LONG_UNALIGNED, i * 8)
            4 -> s.get(ValueLayout.JAVA_INT_UNALIGNED, i * 4).toLong() and 0xFFFFFFFFL
            2 -> s.get(ValueLayout.JAVA_SHORT_UNALIGNED, i * 2).toLong() and 0xFFFF
            else -> s.get(ValueLayout.JAVA_BYTE, i).toLong() and 0xFF
        }

        /** The reference of [op] over the contributions [ranks] of [pool] (PreMulSum: contribution j scaled by its own factor). */
        fun expected(dtype: DType, pool: List<LongArray>, ranks: List<Int>, op: ReduceOp): LongArray {
            // The ranks of an in-process world share one computation (the reference is the slow part).
            val key = listOf(dtype, op.name, ranks, pool.map { it.contentHashCode() }, pool[0].size)
            cache[key]?.let { return it }
            return computeExpected(dtype, pool, ranks, op).also { synchronized(cache) { if (cache.size > 64) cache.clear(); cache[key] = it } }
        }

        private val cache = java.util.concurrent.ConcurrentHashMap<List<Any>, LongArray>()

        private fun computeExpected(dtype: DType, pool: List<LongArray>, ranks: List<Int>, op: ReduceOp): LongArray = LongArray(pool[0].size) { i ->
            val values = ranks.map { j ->
                val x = ExactReference.valueOf(dtype, pool[j][i])
                if (op is ReduceOp.PreMulSum) ExactReference.product(dtype, x, premul(j).factorIn(dtype)) else x
            }
            ExactReference.reduce(dtype, values, if (op == ReduceOp.Avg) ranks.size else 1)
        }

        fun compare(ctx: CaseContext, what: String, got: LongArray, expected: LongArray) {
            if (got.size != expected.size) return ctx.fail("$what: ${got.size} elements, expected ${expected.size}")
            var wrong = 0
            var first = -1
            for (i in got.indices) if (got[i] != expected[i]) { wrong++; if (first < 0) first = i }
            ctx.expect(wrong == 0) {
                "$what: $wrong of ${got.size} elements differ from the exact reference; first [$first]: got 0x${got[first].toString(16)}, expected 0x${expected[first].toString(16)}"
            }
        }
    }
}
