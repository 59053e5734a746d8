package dev.tpcomm.bench.mpi

import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.mpi.MpiBackendFactory
import dev.tpcomm.mpi.MpiCommunicator
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext
import java.lang.foreign.ValueLayout
import kotlin.system.exitProcess

/**
 * Times float32 SUM all-reduce through the MPI backend the way `bench/peers/c_mpi.c` times
 * `MPI_Allreduce`: per size a correctness check, a warm-up at that size of at least
 * `BENCH_SIZE_WARMUP_S` seconds (default 0.5), calibration (double the iterations until the max
 * over ranks reaches 30 ms, then K for the target), then 3 repeats of barrier + K iterations, the
 * per-rank mean, the max over ranks, and the median of the 3.
 *
 * Run: `mpirun -np N java --enable-native-access=ALL-UNNAMED -cp <classpath> dev.tpcomm.bench.mpi.MpiAllReduceBench`.
 * Prints (rank 0) `impl,collective,world,bytes,time_us,algbw_GBps,busbw_GBps` with impl
 * `tpcomm_mpi_<implementation>`, and `#rep,...` lines with the three repeats. `BENCH_PATH=natural`
 * (the default) calls from the `runBlocking` main coroutine with default settings, as a user's loop
 * does; `BENCH_PATH=fast` runs the loop on the communicator's thread
 * (`withContext(comm.nativeDispatcher)`). Before the sizes, a JIT warm-up of `BENCH_WARMUP_S`
 * seconds (default 3) runs what the timing runs, which C does not need.
 * Environment: `BENCH_TARGET_S` (seconds per repeat, default 0.25), `BENCH_BYTES` (one size only).
 */
public object MpiAllReduceBench {
    private val SIZES = longArrayOf(8, 1024, 65536, 1048576, 16777216)
    private const val REPS = 3
    private const val KMAX = 200_000L
    private const val CAL_S = 0.03
    private val WARMUP_S = System.getenv("BENCH_WARMUP_S")?.toDouble() ?: 3.0
    private val SIZE_WARMUP_S = System.getenv("BENCH_SIZE_WARMUP_S")?.toDouble() ?: 0.5

    /** Entry point; see the object's documentation. */
    @JvmStatic
    public fun main(args: Array<String>) {
        val target = System.getenv("BENCH_TARGET_S")?.toDouble() ?: 0.25
        val only = System.getenv("BENCH_BYTES")?.toLong()
        val path = System.getenv("BENCH_PATH") ?: "natural"
        require(path == "natural" || path == "fast") { "BENCH_PATH must be natural or fast, got $path" }
        val code = runBlocking {
            val comm = MpiBackendFactory().create(CommConfig.fromEnvironment()) as MpiCommunicator
            val impl = "tpcomm_mpi_${comm.implementation.id}"
            val failed = if (path == "fast") withContext(comm.nativeDispatcher) { measure(comm, impl, only, target) } else measure(comm, impl, only, target)
            comm.close()
            if (failed) 2 else 0
        }
        exitProcess(code)
    }

    /** Times every size on the calling coroutine's path; true when a result was wrong. */
    private suspend fun measure(comm: MpiCommunicator, impl: String, only: Long?, target: Double): Boolean {
        val world = comm.worldSize
        val tmax = Tensor.zeros(DType.Float64, 1)
        suspend fun timed(t: Tensor, iters: Long): Double {
            comm.barrier()
            val t0 = System.nanoTime()
            for (k in 0 until iters) comm.allReduce(t)
            tmax.setDouble(0, (System.nanoTime() - t0) / 1e9 / iters)
            comm.allReduce(tmax, ReduceOp.Max)
            return tmax.getDouble(0)
        }
        // JIT warm-up of the whole call path (C has none to do): small, medium and large all-reduces.
        // The large one (4 MiB, above the default caller-runs limit) warms the hand-off path too:
        // without it, the first size handed off in a natural run was timed while the JIT compiled
        // that path (1 MiB hand-offs read 2-3x slower after caller-run warm-up than in a run that
        // only hands off; a rank is bound to one core, which the compiler threads then share).
        val warmSmall = Tensor.zeros(DType.Float32, 2)
        val warmMedium = Tensor.zeros(DType.Float32, 16384)
        val warmLarge = Tensor.zeros(DType.Float32, 1 shl 20)
        // Time-based so that every rank stops together: rank 0's clock decides via the all-reduced flag.
        val stop = Tensor.zeros(DType.Int32, 1)
        suspend fun repeatFor(seconds: Double, body: suspend () -> Unit) {
            val end = System.nanoTime() + (seconds * 1e9).toLong()
            do {
                body()
                stop.setLong(0, if (comm.rank == 0 && System.nanoTime() > end) 1 else 0)
                comm.allReduce(stop)
            } while (stop.getLong(0) == 0L)
        }
        // The warm-up runs what the timing runs (barrier, the loop, the MAX of the times, the
        // correctness check's Int64 sum): a path first taken after the warm-up sent the compiled call
        // path back to the interpreter (uncommon traps in issue, allReduceBlocking, the signature
        // exchange; -XX:+PrintCompilation) while C2 recompiled it on the rank's one core, and the
        // first points read 10-100x the steady state.
        val warmCount = Tensor.of(longArrayOf(0))
        repeatFor(WARMUP_S) {
            timed(warmSmall, 1024)
            comm.allReduce(warmCount)
            comm.allReduce(warmMedium)
            comm.allReduce(warmLarge)
        }
        warmCount.close()
        warmSmall.close()
        warmMedium.close()
        warmLarge.close()
        for (bytes in SIZES) {
            if (only != null && only != bytes) continue
            val count = (bytes / 4).toInt()
            val t = Tensor.zeros(DType.Float32, count)
            val seg = t.segment
            for (i in 0 until count) seg.setAtIndex(ValueLayout.JAVA_FLOAT, i.toLong(), ((comm.rank + 1) * (i % 7 + 1)).toFloat())
            comm.allReduce(t)
            var bad = 0L
            for (i in 0 until count) {
                if (seg.getAtIndex(ValueLayout.JAVA_FLOAT, i.toLong()) != ((i % 7 + 1) * world * (world + 1) / 2).toFloat()) bad++
            }
            val badAll = comm.allReduce(Tensor.of(longArrayOf(bad))).getLong(0)
            if (badAll != 0L) {
                if (comm.rank == 0) System.err.println("MpiAllReduceBench: CORRECTNESS FAILURE bytes=$bytes world=$world bad=$badAll")
                return true
            }
            // Warm at this size until rank 0 has seen SIZE_WARMUP_S pass (the flag is all-reduced, so
            // every rank makes the same calls). A few calls were not enough: the first size above the
            // caller-runs limit after smaller ones ran on the caller's thread sent the bench's loops and
            // the hand-off's resume path (kotlinx's event loop, the continuation) through C1 and C2 on
            // the rank's one bound core, and 16 MiB read 5.4, 4.2 then 2.8 ms in its three repeats
            // (-XX:+PrintCompilation: uncommon traps in measure and timed, tier-3 compiles of
            // EventLoopImplBase), against 2.3 ms once compiled.
            val warm = if (bytes <= 65536) 50 else if (bytes <= 1048576) 10 else 2
            repeatFor(SIZE_WARMUP_S) {
                repeat(warm) { comm.allReduce(t) }
                timed(t, 1)
            }
            var it = 1L
            var tit: Double
            while (true) {
                tit = timed(t, it)
                if (tit * it >= CAL_S || it >= KMAX) break
                it *= 2
            }
            val k = (target / tit + 0.5).toLong().coerceIn(1, KMAX)
            val ts = DoubleArray(REPS) { timed(t, k) }
            val time = ts.sorted()[REPS / 2]
            if (comm.rank == 0) {
                val algbw = bytes / time / 1e9
                val busbw = algbw * 2.0 * (world - 1) / world
                println("%s,allreduce,%d,%d,%.3f,%.4f,%.4f".format(impl, world, bytes, time * 1e6, algbw, busbw))
                println("#rep,%s,allreduce,%d,%d,%d,%.3f,%.3f,%.3f".format(impl, world, bytes, k, ts[0] * 1e6, ts[1] * 1e6, ts[2] * 1e6))
                System.out.flush()
            }
            t.close()
        }
        return false
    }
}
