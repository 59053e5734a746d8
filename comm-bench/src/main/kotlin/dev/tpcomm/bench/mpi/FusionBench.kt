package dev.tpcomm.bench.mpi

import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.GradientBucket
import dev.tpcomm.coroutines.allReduceCoalesced
import dev.tpcomm.mpi.MpiBackendFactory
import dev.tpcomm.mpi.MpiCommunicator
import kotlinx.coroutines.runBlocking

/**
 * Four small gradients all-reduced per step three ways (issue 21 item 3), called as a training
 * loop does, from the `runBlocking` main coroutine with default settings: four separate
 * `allReduce` calls, one `allReduceCoalesced` of the four (a fusion buffer per call, from the
 * pool), and one `GradientBucket.allReduce` (a persistent bucket whose views are the gradients).
 * The three alternate round by round, the order rotating; per round and case the max over ranks
 * of the mean time per step over K steps (K calibrated to about `BENCH_TARGET_S`, default 0.1 s).
 *
 * Run: `mpirun -np N java --enable-native-access=ALL-UNNAMED -cp <classpath> dev.tpcomm.bench.mpi.FusionBench`
 * (scripts/fusion-bench.sh). Rank 0 prints `round,case,us_per_step` lines, then per case the
 * median and min-max over rounds. Environment: `BENCH_ROUNDS` (default 9), `BENCH_TARGET_S`,
 * `BENCH_WARMUP_S` (default 3), `BENCH_SHAPES` (element counts, default `256,1024,64,4096`).
 */
public object FusionBench {
    /** Entry point; see the object's documentation. */
    @JvmStatic
    public fun main(args: Array<String>) {
        val rounds = System.getenv("BENCH_ROUNDS")?.toInt() ?: 9
        val target = System.getenv("BENCH_TARGET_S")?.toDouble() ?: 0.1
        val warmup = System.getenv("BENCH_WARMUP_S")?.toDouble() ?: 3.0
        val sizes = (System.getenv("BENCH_SHAPES") ?: "256,1024,64,4096").split(',').map { it.trim().toInt() }
        runBlocking {
            val comm = MpiBackendFactory().create(CommConfig.fromEnvironment()) as MpiCommunicator
            val separate = sizes.map { Tensor.zeros(DType.Float32, it) }
            val bucket = GradientBucket(DType.Float32, sizes.map { listOf(it) })
            val cases: Map<String, suspend () -> Unit> = linkedMapOf(
                "separate" to suspend { for (t in separate) comm.allReduce(t) },
                "coalesced" to suspend { comm.allReduceCoalesced(separate); Unit },
                "bucket" to suspend { bucket.allReduce(comm); Unit },
            )
            val tmax = Tensor.zeros(DType.Float64, 1)
            suspend fun perStep(step: suspend () -> Unit, iters: Long): Double {
                comm.barrier()
                val t0 = System.nanoTime()
                for (k in 0 until iters) step()
                tmax.setDouble(0, (System.nanoTime() - t0) / 1e3 / iters)
                comm.allReduce(tmax, ReduceOp.Max)
                return tmax.getDouble(0)
            }
            val stop = Tensor.zeros(DType.Int32, 1)
            val end = System.nanoTime() + (warmup * 1e9).toLong()
            while (true) {
                for (step in cases.values) perStep(step, 200)
                stop.setLong(0, if (comm.rank == 0 && System.nanoTime() > end) 1 else 0)
                comm.allReduce(stop)
                if (stop.getLong(0) != 0L) break
            }
            val iters = cases.mapValues { (_, step) -> (target * 1e6 / perStep(step, 200)).toLong().coerceIn(20, 200_000) }
            val results = cases.keys.associateWith { ArrayList<Double>() }
            if (comm.rank == 0) println("round,case,us_per_step")
            val names = cases.keys.toList()
            for (round in 1..rounds) {
                for (i in names.indices) {
                    val name = names[(i + round) % names.size]
                    val us = perStep(cases.getValue(name), iters.getValue(name))
                    results.getValue(name) += us
                    if (comm.rank == 0) println("$round,$name,${"%.3f".format(us)}")
                }
            }
            if (comm.rank == 0) {
                println()
                println("| case | µs per step (median, min-max over $rounds rounds) |")
                println("| --- | --- |")
                for ((name, xs) in results) {
                    val s = xs.sorted()
                    println("| $name | ${"%.2f".format(s[s.size / 2])} (${"%.2f".format(s.first())}-${"%.2f".format(s.last())}) |")
                }
            }
            bucket.close()
            comm.close()
        }
    }
}
