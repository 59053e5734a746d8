package dev.tpcomm.bench.mpi

import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.mpi.MpiBackendFactory
import dev.tpcomm.mpi.MpiCommunicator
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext

/**
 * What the default consistency check costs on MPI (issue 20 item 2): float32 in-place SUM
 * all-reduce through two communicators of one job, the world (the default: checked) and a
 * duplicate with `checkConsistency = false`, alternating round by round so both see the same
 * machine state, on both call paths: from `runBlocking` (the natural path) and on the
 * communicator's own thread (the fast path). Per round and case: the max over ranks of the mean
 * time per call over K calls (K calibrated to about `BENCH_TARGET_S`, default 0.1 s).
 *
 * Run: `mpirun -np N java --enable-native-access=ALL-UNNAMED -cp <classpath> dev.tpcomm.bench.mpi.MismatchCheckBench`
 * (scripts/mismatch-check-bench.sh). Rank 0 prints one CSV line per round and case,
 * `round,path,bytes,checked_us,unchecked_us`, then a summary: per path and size the medians,
 * min-max, and the median of the per-round ratios. Environment: `BENCH_ROUNDS` (default 7),
 * `BENCH_TARGET_S`, `BENCH_WARMUP_S` (default 3).
 */
public object MismatchCheckBench {
    private val SIZES = longArrayOf(8, 65536, 1048576)

    /** Entry point; see the object's documentation. */
    @JvmStatic
    public fun main(args: Array<String>) {
        val rounds = System.getenv("BENCH_ROUNDS")?.toInt() ?: 7
        val target = System.getenv("BENCH_TARGET_S")?.toDouble() ?: 0.1
        val warmup = System.getenv("BENCH_WARMUP_S")?.toDouble() ?: 3.0
        runBlocking {
            val checked = MpiBackendFactory().create(CommConfig.fromEnvironment()) as MpiCommunicator
            val unchecked = checked.duplicate(checked.config.copy(checkConsistency = false))
            val tmax = Tensor.zeros(DType.Float64, 1)
            suspend fun perCall(comm: MpiCommunicator, t: Tensor, iters: Long, fast: Boolean): Double {
                suspend fun loop(): Double {
                    comm.barrier()
                    val t0 = System.nanoTime()
                    for (k in 0 until iters) comm.allReduce(t)
                    return (System.nanoTime() - t0) / 1e3 / iters
                }
                val mine = if (fast) withContext(comm.nativeDispatcher) { loop() } else loop()
                tmax.setDouble(0, mine)
                checked.allReduce(tmax, ReduceOp.Max)
                return tmax.getDouble(0)
            }
            // JIT warm-up of both paths on both communicators.
            val warm = Tensor.zeros(DType.Float32, 2)
            val end = System.nanoTime() + (warmup * 1e9).toLong()
            val stop = Tensor.zeros(DType.Int32, 1)
            while (true) {
                for (c in listOf(checked, unchecked)) { perCall(c, warm, 200, fast = false); perCall(c, warm, 200, fast = true) }
                stop.setLong(0, if (checked.rank == 0 && System.nanoTime() > end) 1 else 0)
                checked.allReduce(stop)
                if (stop.getLong(0) != 0L) break
            }
            val results = HashMap<Triple<String, Long, Boolean>, MutableList<Double>>()
            val ratios = HashMap<Pair<String, Long>, MutableList<Double>>()
            if (checked.rank == 0) println("round,path,bytes,checked_us,unchecked_us")
            for (round in 1..rounds) {
                for (path in listOf("natural", "fast")) {
                    val fast = path == "fast"
                    for (bytes in SIZES) {
                        val t = Tensor.zeros(DType.Float32, (bytes / 4).toInt())
                        // K from the unchecked communicator's time, the same K for both.
                        val probe = perCall(unchecked, t, 50, fast)
                        val iters = (target * 1e6 / probe).toLong().coerceIn(20, 200_000)
                        // Alternate which goes first from round to round.
                        val (a, b) = if (round % 2 == 0) {
                            val u = perCall(unchecked, t, iters, fast); perCall(checked, t, iters, fast) to u
                        } else {
                            val c = perCall(checked, t, iters, fast); c to perCall(unchecked, t, iters, fast)
                        }
                        results.getOrPut(Triple(path, bytes, true)) { ArrayList() } += a
                        results.getOrPut(Triple(path, bytes, false)) { ArrayList() } += b
                        ratios.getOrPut(path to bytes) { ArrayList() } += a / b
                        if (checked.rank == 0) println("$round,$path,$bytes,${"%.3f".format(a)},${"%.3f".format(b)}")
                        t.close()
                    }
                }
            }
            if (checked.rank == 0) {
                println()
                println("| path | bytes | checked µs (median, min-max) | unchecked µs (median, min-max) | checked/unchecked (median of per-round ratios, min-max) |")
                println("| --- | --- | --- | --- | --- |")
                for (path in listOf("natural", "fast")) for (bytes in SIZES) {
                    val c = results.getValue(Triple(path, bytes, true)).sorted()
                    val u = results.getValue(Triple(path, bytes, false)).sorted()
                    val r = ratios.getValue(path to bytes).sorted()
                    fun med(x: List<Double>) = x[x.size / 2]
                    println("| $path | $bytes | ${"%.2f".format(med(c))} (${"%.2f".format(c.first())}-${"%.2f".format(c.last())}) | " +
                        "${"%.2f".format(med(u))} (${"%.2f".format(u.first())}-${"%.2f".format(u.last())}) | " +
                        "${"%.3f".format(med(r))} (${"%.3f".format(r.first())}-${"%.3f".format(r.last())}) |")
                }
            }
            unchecked.close()
            checked.close()
        }
    }
}
