package dev.tpcomm.bench

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.reproducible
import dev.tpcomm.coroutines.runLocalWorld
import dev.tpcomm.mpi.MpiBackendFactory
import kotlinx.coroutines.runBlocking

/**
 * What the reproducible reductions cost (issue 36): float32 in-place all-reduce (`BENCH_OP`: `Avg`, the
 * default, whose repeated calls keep the values finite and unchanged; `Sum` makes them grow by the world
 * size per call until they overflow, and NaN takes the slow path), the default
 * against `comm.reproducible()`, at 8 B, 64 KiB, 1 MiB and 64 MiB, alternating round by round (which
 * mode goes first alternates too) so both see the same machine state. Per round and case: the max
 * over ranks of the mean time per call over K calls (K calibrated from the default mode to about
 * `BENCH_TARGET_S`, the same K for both modes).
 *
 * Run in-process (`BENCH_WORLD` ranks, default 4): `java -cp <classpath> dev.tpcomm.bench.ReproducibleBench`;
 * on MPI: `mpirun -np N java --enable-native-access=ALL-UNNAMED -cp <classpath> dev.tpcomm.bench.ReproducibleBench mpi`
 * (scripts/reproducible-bench.sh runs both). Rank 0 prints one CSV line per round and size,
 * `backend,world,round,bytes,default_us,reproducible_us`, then a Markdown summary: per size the medians,
 * min-max, and the median (min-max) of the per-round ratios. Environment: `BENCH_ROUNDS` (default 5),
 * `BENCH_TARGET_S` (0.2), `BENCH_WARMUP_S` (2), `BENCH_SIZES` (comma-separated bytes).
 */
public object ReproducibleBench {
    /** Entry point; see the object's documentation. */
    @JvmStatic
    public fun main(args: Array<String>) {
        val sizes = System.getenv("BENCH_SIZES")?.split(',')?.map { it.trim().toLong() } ?: listOf(8L, 65536L, 1L shl 20, 64L shl 20)
        val rounds = System.getenv("BENCH_ROUNDS")?.toInt() ?: 5
        val target = System.getenv("BENCH_TARGET_S")?.toDouble() ?: 0.2
        val warmup = System.getenv("BENCH_WARMUP_S")?.toDouble() ?: 2.0
        if (args.firstOrNull() == "mpi") {
            runBlocking {
                MpiBackendFactory().create(CommConfig.fromEnvironment()).use { comm -> run(comm, "mpi", sizes, rounds, target, warmup) }
            }
        } else {
            val world = System.getenv("BENCH_WORLD")?.toInt() ?: 4
            runBlocking { runLocalWorld(world, CommConfig(worldSize = world)) { comm -> run(comm, "local", sizes, rounds, target, warmup) } }
        }
    }

    private suspend fun run(comm: Communicator, backend: String, sizes: List<Long>, rounds: Int, target: Double, warmup: Double) {
        val op = if (System.getenv("BENCH_OP") == "Sum") ReduceOp.Sum else ReduceOp.Avg
        val exact = comm.reproducible()
        val tmax = Tensor.zeros(DType.Float64, 1)
        suspend fun perCall(c: Communicator, t: Tensor, iters: Long): Double {
            comm.barrier()
            val t0 = System.nanoTime()
            for (k in 0 until iters) c.allReduce(t, op)
            tmax.setDouble(0, (System.nanoTime() - t0) / 1e3 / iters)
            comm.allReduce(tmax, ReduceOp.Max)
            return tmax.getDouble(0)
        }
        // Values of one scale, as gradients are (the fast path: sums exact in double); reset each measurement.
        fun fill(t: Tensor) {
            val s = t.segment
            for (i in 0 until t.numel) s.set(java.lang.foreign.ValueLayout.JAVA_FLOAT_UNALIGNED, i * 4, ((i * 7919 + comm.rank * 104729) % 1000 - 500) * 1e-3f)
        }
        // JIT warm-up of both modes at a small and a medium size (the same on every rank: a fixed count).
        val warm = listOf(Tensor.zeros(DType.Float32, 2), Tensor.zeros(DType.Float32, 16384))
        val calls = maxOf(20, (warmup * 200).toInt())
        repeat(calls) { for (t in warm) { comm.allReduce(t, op); exact.allReduce(t, op) } }
        warm.forEach { it.close() }
        val results = HashMap<Pair<Long, Boolean>, MutableList<Double>>()
        val ratios = HashMap<Long, MutableList<Double>>()
        if (comm.rank == 0) println("# float32 allReduce $op; backend,world,round,bytes,default_us,reproducible_us")
        for (round in 1..rounds) for (bytes in sizes) {
            val t = Tensor.zeros(DType.Float32, (bytes / 4).toInt())
            fill(t)
            val probe = perCall(comm, t, 3)
            // The same K on every rank: rank 0's probe, broadcast.
            tmax.setDouble(0, probe)
            comm.broadcast(tmax, 0)
            val iters = (target * 1e6 / tmax.getDouble(0)).toLong().coerceIn(3, 100_000)
            fun measure(c: Communicator): suspend () -> Double = { fill(t); perCall(c, t, iters) }
            val (d, r) = if (round % 2 == 0) {
                val r = measure(exact)(); measure(comm)() to r
            } else {
                val d = measure(comm)(); d to measure(exact)()
            }
            results.getOrPut(bytes to false) { ArrayList() } += d
            results.getOrPut(bytes to true) { ArrayList() } += r
            ratios.getOrPut(bytes) { ArrayList() } += r / d
            if (comm.rank == 0) println("$backend,${comm.worldSize},$round,$bytes,${"%.2f".format(d)},${"%.2f".format(r)}")
            t.close()
        }
        if (comm.rank == 0) {
            println()
            println("| backend | ranks | bytes | default µs (median, min-max) | reproducible µs (median, min-max) | reproducible/default (median of per-round ratios, min-max) |")
            println("| --- | --- | --- | --- | --- | --- |")
            for (bytes in sizes) {
                val d = results.getValue(bytes to false).sorted()
                val r = results.getValue(bytes to true).sorted()
                val q = ratios.getValue(bytes).sorted()
                fun med(x: List<Double>) = x[x.size / 2]
                println("| $backend | ${comm.worldSize} | $bytes | ${"%.1f".format(med(d))} (${"%.1f".format(d.first())}-${"%.1f".format(d.last())}) | " +
                    "${"%.1f".format(med(r))} (${"%.1f".format(r.first())}-${"%.1f".format(r.last())}) | " +
                    "${"%.2f".format(med(q))} (${"%.2f".format(q.first())}-${"%.2f".format(q.last())}) |")
            }
        }
        tmax.close()
    }
}
