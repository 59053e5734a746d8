package dev.tpcomm.bench

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor

/**
 * nccl-tests' method on any [Communicator]: for each size, a correctness check with known inputs,
 * the first [BenchOptions.firstCalls] calls timed (the warm-up a user's loop meets), warm-up until the time per call
 * settled ([WarmUpSettling]), an iteration count calibrated so one repeat takes about [BenchOptions.timeBudgetSeconds]
 * (identical on every rank because it derives from a max-reduced time), one untimed repeat of that
 * length (JIT warm-up), then repeats of
 * barrier + K timed iterations, each rank's mean per iteration, max over ranks; the median repeat
 * is reported.
 *
 * Every rank of the world runs [run] with the same options; all ranks return the same results.
 * Not thread-safe; one run per communicator at a time. A failing collective propagates its exception.
 */
public class BenchRunner(private val comm: Communicator, private val options: BenchOptions) {
    private val world = comm.worldSize
    private val rank = comm.rank
    private val scratch = Tensor.zeros(DType.Float64, 1)
    private val wrongCount = Tensor.zeros(DType.Int64, 1)

    /** Runs every op and size of the options; calls [onResult] (on every rank) after each point. */
    public suspend fun run(onResult: (BenchResult) -> Unit = {}): List<BenchResult> {
        val out = ArrayList<BenchResult>()
        // JIT pre-pass: without it the first point of each run measured up to 5x slower than the
        // same size measured later (code shared by every size is still being compiled).
        if (options.iters == null && options.warmup == null) {
            for (op in options.ops) {
                val b = Buffers(op, (options.sizes.min() / options.dtype.byteSize).toInt())
                try { warmUp(b) } finally { b.close() }
            }
        }
        for (op in options.ops) for (bytes in options.sizes) {
            val r = measure(op, bytes)
            out += r
            onResult(r)
        }
        return out
    }

    /** Measures one point. */
    public suspend fun measure(op: BenchOp, bytes: Long): BenchResult {
        val count = bytes / options.dtype.byteSize
        val buffers = Buffers(op, count.toInt())
        try {
            val wrong = if (options.check) check(op, buffers) else -1L
            buffers.fillForTiming()
            // The first calls at this size, before any warm-up at it: what a user's loop pays when it
            // meets a new size (in a fresh JVM's first point, its first calls at all but the JIT pre-pass).
            val first = if (options.firstCalls > 0) firstCalls(buffers) * 1e6 else Double.NaN
            warmUp(buffers)
            val k = options.iters?.toLong() ?: calibrate(buffers)
            // One untimed repeat at full length: on the JVM the first thousands of calls still run
            // partly interpreted or in C1 code, and the JIT's compile threads compete for the CPU.
            if (options.iters == null) timed(buffers, k)
            val reps = List(options.repeats) { timed(buffers, k) }
            val median = reps.sorted()[reps.size / 2]
            return BenchResult(
                impl = options.implLabel, op = op, world = world, bytes = bytes, count = count,
                timeUs = median * 1e6,
                algbwGBps = op.algbw(bytes, world, median),
                busbwGBps = op.busbw(bytes, world, median),
                wrong = wrong, iterations = k, repeatsUs = reps.map { it * 1e6 }, firstUs = first,
            )
        } finally {
            buffers.close()
        }
    }

    /**
     * `--warmup N`: exactly N iterations. Otherwise until the time per call has settled or
     * [BenchOptions.warmupSeconds] have passed ([WarmUpSettling]): the JIT compiles a hot loop (and
     * the Vector API kernels, which are very slow before C2 compiles them) only after some ten
     * thousand calls, later still when its compiler threads compete for the CPU, so a fixed count
     * timed small sizes before their steady state. Chunks of calls double until one lasts
     * [WarmUpSettling.CHUNK_SECONDS]. Every rank stops after the same chunk: the decision uses the
     * max-reduced elapsed time.
     */
    private suspend fun warmUp(b: Buffers) {
        options.warmup?.let { n -> repeat(n) { b.runOnce() }; return }
        val settling = WarmUpSettling(options.warmupSeconds)
        val t0 = System.nanoTime()
        var chunk = 8L
        while (true) {
            var i = 0L
            while (i < chunk) { b.runOnce(); i++ }
            scratch.setDouble(0, (System.nanoTime() - t0) / 1e9)
            comm.allReduce(scratch, ReduceOp.Max)
            if (settling.settled(chunk, scratch.getDouble(0))) break
            if (settling.lastChunkSeconds < WarmUpSettling.CHUNK_SECONDS) chunk *= 2
        }
    }

    /**
     * The mean time (seconds, max over ranks) of the first [BenchOptions.firstCalls] calls, or of
     * fewer when they pass [BenchOptions.timeBudgetSeconds] first (64 MiB points): chunks of 1, 2,
     * 4, ... calls, each rank timing only its calls, every rank stopping after the same chunk (the
     * decision uses the max-reduced elapsed time, outside the timed calls).
     */
    private suspend fun firstCalls(b: Buffers): Double {
        comm.barrier()
        var spent = 0L
        var done = 0L
        var chunk = 1L
        while (true) {
            val n = minOf(chunk, options.firstCalls - done)
            val t0 = System.nanoTime()
            var i = 0L
            while (i < n) { b.runOnce(); i++ }
            spent += System.nanoTime() - t0
            done += n
            scratch.setDouble(0, spent / 1e9)
            comm.allReduce(scratch, ReduceOp.Max)
            if (done >= options.firstCalls || scratch.getDouble(0) >= options.timeBudgetSeconds) break
            chunk *= 2
        }
        scratch.setDouble(0, spent / 1e9 / done)
        comm.allReduce(scratch, ReduceOp.Max)
        return scratch.getDouble(0)
    }

    private suspend fun calibrate(b: Buffers): Long {
        var it = 1L
        var perIter: Double
        while (true) {
            perIter = timed(b, it)
            if (perIter * it >= CALIBRATION_SECONDS || it >= MAX_ITERS) break
            it *= 2
        }
        return (options.timeBudgetSeconds / perIter + 0.5).toLong().coerceIn(1L, MAX_ITERS)
    }

    /** Barrier, [k] iterations, this rank's mean per iteration, max over ranks (seconds). */
    private suspend fun timed(b: Buffers, k: Long): Double {
        comm.barrier()
        val t0 = System.nanoTime()
        var i = 0L
        while (i < k) { b.runOnce(); i++ }
        val t = (System.nanoTime() - t0) / 1e9 / k
        scratch.setDouble(0, t)
        comm.allReduce(scratch, ReduceOp.Max)
        return scratch.getDouble(0)
    }

    private suspend fun check(op: BenchOp, b: Buffers): Long {
        val bad = b.fillAndCheck()
        wrongCount.setLong(0, bad)
        comm.allReduce(wrongCount, ReduceOp.Sum)
        return wrongCount.getLong(0)
    }

    /** The tensors one point needs, allocated once so the timed loop allocates nothing (but all-to-all's result). */
    private inner class Buffers(val op: BenchOp, val count: Int) : AutoCloseable {
        val dtype = options.dtype
        val redop = options.redop
        val root = options.root
        val input: Tensor = when (op) {
            BenchOp.ReduceScatter, BenchOp.AllToAll -> Tensor.zeros(dtype, world * count)
            else -> Tensor.zeros(dtype, count)
        }
        val output: Tensor? = when (op) {
            BenchOp.AllGather -> Tensor.zeros(dtype, world * count)
            BenchOp.ReduceScatter -> Tensor.zeros(dtype, count)
            else -> null
        }

        suspend fun runOnce() {
            when (op) {
                BenchOp.AllReduce -> comm.allReduce(input, redop)
                BenchOp.AllGather -> comm.allGatherInto(output!!, input)
                BenchOp.ReduceScatter -> comm.reduceScatterInto(output!!, input, redop)
                BenchOp.Broadcast -> comm.broadcast(input, root)
                BenchOp.Reduce -> comm.reduce(input, root, redop)
                BenchOp.AllToAll -> comm.allToAll(input).close()
            }
        }

        /** Fills known inputs, runs the collective once, and counts this rank's wrong elements. */
        suspend fun fillAndCheck(): Long {
            val tol = Elements.tolerance(dtype)
            when (op) {
                BenchOp.AllReduce, BenchOp.Reduce -> {
                    Elements.fill(input) { i -> CheckPattern.reduceInput(redop, world, rank, i).toDouble() }
                    runOnce()
                    if (op == BenchOp.Reduce && rank != root) {
                        // Non-roots' buffers must be left as they were.
                        return Elements.countWrong(input, tol) { i -> CheckPattern.reduceInput(redop, world, rank, i).toDouble() }
                    }
                    return Elements.countWrong(input, tol) { i -> CheckPattern.reduceExpected(redop, dtype, world, i) }
                }
                BenchOp.AllGather -> {
                    Elements.fill(input) { i -> CheckPattern.gatherInput(rank, i) }
                    Elements.fill(output!!) { -1.0 }
                    runOnce()
                    return Elements.countWrong(output, tol) { j -> CheckPattern.gatherInput((j / count).toInt(), j % count) }
                }
                BenchOp.ReduceScatter -> {
                    Elements.fill(input) { j -> CheckPattern.reduceInput(redop, world, rank, j).toDouble() }
                    Elements.fill(output!!) { -1.0 }
                    runOnce()
                    val base = rank.toLong() * count
                    return Elements.countWrong(output, tol) { i -> CheckPattern.reduceExpected(redop, dtype, world, base + i) }
                }
                BenchOp.Broadcast -> {
                    Elements.fill(input) { i -> if (rank == root) CheckPattern.broadcastValue(i) else -1.0 }
                    runOnce()
                    return Elements.countWrong(input, tol) { i -> CheckPattern.broadcastValue(i) }
                }
                BenchOp.AllToAll -> {
                    Elements.fill(input) { j -> CheckPattern.allToAllInput(rank, (j / count).toInt(), j % count) }
                    val result = comm.allToAll(input)
                    try {
                        return Elements.countWrong(result, tol) { j -> CheckPattern.allToAllInput((j / count).toInt(), rank, j % count) }
                    } finally {
                        result.close()
                    }
                }
            }
        }

        /** Inputs for the timed loop: zeros, so repeated in-place reductions stay finite (speed does not depend on the values). */
        fun fillForTiming() {
            if (op != BenchOp.Broadcast) input.segment.fill(0)
        }

        override fun close() {
            input.close()
            output?.close()
        }
    }

    public companion object {
        /** The calibration doubles the iteration count until one timing lasts this long. */
        public const val CALIBRATION_SECONDS: Double = 0.03

        /** Upper bound on the iterations of one repeat. */
        public const val MAX_ITERS: Long = 200_000
    }
}
