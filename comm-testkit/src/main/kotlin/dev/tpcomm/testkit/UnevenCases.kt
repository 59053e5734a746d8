package dev.tpcomm.testkit

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import java.lang.foreign.MemorySegment

/**
 * The uneven collectives (`allGatherV`, `reduceScatterV`, `allToAllV`): even, skewed and zero-row
 * sizes per rank, allocating and `*Into`, and the bad sizes every rank refuses alike. Their
 * mismatches across ranks are in [FailureCases].
 */
internal object UnevenCases {
    private const val COLS = 3

    private fun dtypes(ctx: CaseContext) = ctx.options.dtypes.sortedBy { it.ordinal }

    /** Per-rank row counts: every rank 2 rows; skewed (one rank in five with none); all on the last rank. */
    fun patterns(n: Int, salt: Long): List<List<Int>> = listOf(
        List(n) { 2 },
        List(n) { ((it * 7 + salt.toInt() and 0xff) + 3) % 5 },
        List(n) { if (it == n - 1) 4 else 0 },
    )

    /** Rows [start] until `start + len` of host tensor [t] (dim 0) as a new host tensor. */
    fun rows(t: Tensor, start: Int, len: Int): Tensor {
        val out = Tensor.zeros(t.dtype, t.shape.toMutableList().also { it[0] = len })
        val rowBytes = t.stride(0) * t.dtype.byteSize
        if (len > 0) MemorySegment.copy(t.segment, start * rowBytes, out.segment, 0L, len * rowBytes)
        return out
    }

    /** Host tensors [parts] joined along dim 0. */
    fun join(dtype: DType, parts: List<Tensor>): Tensor {
        val total = parts.sumOf { it.shape[0] }
        val out = Tensor.zeros(dtype, listOf(total, COLS))
        var at = 0L
        for (p in parts) {
            MemorySegment.copy(p.segment, 0L, out.segment, at, p.byteSize)
            at += p.byteSize
        }
        return out
    }

    private fun data(ctx: CaseContext, salt: Long, rank: Int, dtype: DType, rows: Int) = TestData.input(ctx.seed, salt, rank, dtype, listOf(rows, COLS))

    /** rows sent by rank i to rank j in the allToAllV case: skewed, with zeros. */
    fun split(i: Int, j: Int, salt: Long): Int = ((i * 5 + j * 3 + (salt and 0xff).toInt()) % 4)

    val all: List<ConformanceCase> = listOf(
        ConformanceCase("allGatherV: even, skewed and zero-row ranks, every dtype, allocating and Into", CaseKind.Collective) { comm, ctx ->
            val n = comm.worldSize
            val me = comm.rank
            val p = ctx.options.placement
            for (dtype in dtypes(ctx)) for ((k, sizes) in patterns(n, ctx.seed + dtype.ordinal).withIndex()) for (into in listOf(false, true)) {
                val salt = 600L + 10 * dtype.ordinal + k
                val input = p.toBackend(data(ctx, salt, me, dtype, sizes[me]))
                val out = if (into) {
                    comm.allGatherVInto(p.toBackend(Tensor.zeros(dtype, sizes.sum(), COLS)), input, sizes)
                } else {
                    comm.allGatherV(input, sizes)
                }
                val expected = join(dtype, List(n) { data(ctx, salt, it, dtype, sizes[it]) })
                TestData.exactMismatch(expected, p.toHost(out))?.let { ctx.fail("allGatherV $dtype sizes $sizes${if (into) " (Into)" else ""}: $it") }
            }
        },
        ConformanceCase("reduceScatterV: even, skewed and zero-row ranks, every dtype and op", CaseKind.Collective) { comm, ctx ->
            val n = comm.worldSize
            val me = comm.rank
            val p = ctx.options.placement
            for (dtype in dtypes(ctx)) {
                val ops = CollectiveScenario.opsFor(ctx.options, dtype, n)
                for ((k, base) in ops.withIndex()) {
                    // PreMulSum: every rank its own factor (CollectiveScenario.preMulSum).
                    fun opOf(r: Int): ReduceOp = (base as? ReduceOp.PreMulSum)?.let { CollectiveScenario.preMulSum(it.factor, r) } ?: base
                    val op = opOf(me)
                    val sizes = patterns(n, ctx.seed + k)[k % 3]
                    val total = sizes.sum()
                    val salt = 700L + 10 * dtype.ordinal + k
                    val input = p.toBackend(data(ctx, salt, me, dtype, total))
                    val into = k % 2 == 1
                    val out = if (into) {
                        comm.reduceScatterVInto(p.toBackend(Tensor.zeros(dtype, sizes[me], COLS)), input, sizes, op)
                    } else {
                        comm.reduceScatterV(input, sizes, op)
                    }
                    val start = sizes.take(me).sum()
                    val mine = List(n) { rows(data(ctx, salt, it, dtype, total), start, sizes[me]) }
                    ReferenceReduction.firstMismatch(List(n) { opOf(it) }, mine, p.toHost(out))?.let { ctx.fail("reduceScatterV $dtype $op sizes $sizes: $it") }
                    TestData.exactMismatch(data(ctx, salt, me, dtype, total), p.toHost(input))?.let { ctx.fail("reduceScatterV $dtype $op sizes $sizes: the input must be unchanged: $it") }
                }
            }
        },
        ConformanceCase("allToAllV: skewed splits with empty pairs, every dtype; equal splits equal allToAll", CaseKind.Collective) { comm, ctx ->
            val n = comm.worldSize
            val me = comm.rank
            val p = ctx.options.placement
            for (dtype in dtypes(ctx)) for (into in listOf(false, true)) {
                val salt = 800L + 10 * dtype.ordinal + (if (into) 1 else 0)
                val inputSplits = List(n) { split(me, it, salt) }
                val outputSplits = List(n) { split(it, me, salt) }
                fun inputOf(r: Int) = data(ctx, salt, r, dtype, List(n) { split(r, it, salt) }.sum())
                val input = p.toBackend(inputOf(me))
                val out = if (into) {
                    comm.allToAllVInto(p.toBackend(Tensor.zeros(dtype, outputSplits.sum(), COLS)), input, inputSplits, outputSplits)
                } else {
                    comm.allToAllV(input, inputSplits, outputSplits)
                }
                val expected = join(dtype, List(n) { j -> rows(inputOf(j), (0 until me).sumOf { split(j, it, salt) }, split(j, me, salt)) })
                TestData.exactMismatch(expected, p.toHost(out))?.let { ctx.fail("allToAllV $dtype inputSplits $inputSplits outputSplits $outputSplits: $it") }
            }
            val dtype = if (DType.Float32 in ctx.options.dtypes) DType.Float32 else dtypes(ctx)[0]
            val even = List(n) { 2 }
            val x = data(ctx, 899, me, dtype, 2 * n)
            val v = p.toHost(comm.allToAllV(p.toBackend(x.copy()), even, even))
            val a = p.toHost(comm.allToAll(p.toBackend(x.copy())))
            TestData.exactMismatch(a, v)?.let { ctx.fail("allToAllV with equal splits differs from allToAll: $it") }
        },
        ConformanceCase("arguments: bad sizes of the uneven collectives are refused", CaseKind.Collective) { comm, ctx ->
            val n = comm.worldSize
            val me = comm.rank
            val p = ctx.options.placement
            val dt = if (DType.Float32 in ctx.options.dtypes) DType.Float32 else dtypes(ctx)[0]
            val ones = List(n) { 1 }
            val input = p.toBackend(data(ctx, 900, me, dt, 1))
            val full = p.toBackend(data(ctx, 901, me, dt, n))
            suspend fun refused(what: String, vararg tensors: Tensor, block: suspend () -> Unit) =
                ArgumentCases.refused(comm, ctx, what, tensors.toList(), block)
            refused("allGatherV with ${n + 1} sizes", input) { comm.allGatherV(input, ones + 1) }
            refused("allGatherV with a negative size", input) { comm.allGatherV(input, ones.toMutableList().also { it[(me + 1) % n] = -1 }) }
            refused("allGatherV whose own size is not the input's rows", input) { comm.allGatherV(input, ones.toMutableList().also { it[me] = 2 }) }
            val badOut = p.toBackend(Tensor.zeros(dt, n + 1, COLS))
            refused("allGatherVInto with an output of the wrong rows", badOut, input) { comm.allGatherVInto(badOut, input, ones) }
            refused("reduceScatterV with ${n - 1} sizes", full) { comm.reduceScatterV(full, List(n - 1) { 1 }) }
            refused("reduceScatterV whose sizes do not add up to the input's rows", full) { comm.reduceScatterV(full, ones.toMutableList().also { it[0] = 2 }) }
            refused("reduceScatterV with a negative size", full) { comm.reduceScatterV(full, ones.toMutableList().also { it[0] = -1; if (n > 1) it[1] = 3 }) }
            refused("allToAllV whose inputSplits do not add up to the input's rows", full) { comm.allToAllV(full, ones.toMutableList().also { it[0] = 2 }, ones) }
            refused("allToAllV with a negative outputSplit", full) { comm.allToAllV(full, ones, ones.toMutableList().also { it[0] = -1 }) }
            refused("allToAllV with too few outputSplits", full) { comm.allToAllV(full, ones, ones.drop(1)) }
            val wrongOut = p.toBackend(Tensor.zeros(dt, n, COLS + 1))
            refused("allToAllVInto with an output of the wrong row shape", wrongOut, full) { comm.allToAllVInto(wrongOut, full, ones, ones) }
            ArgumentCases.stillUsable(comm, ctx, "refused uneven sizes")
        },
    )
}
