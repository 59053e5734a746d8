package dev.tpcomm.bench

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import kotlinx.coroutines.runBlocking
import kotlin.system.exitProcess

/**
 * What a fresh JVM's first small calls cost next to the steady state (issue 37): an 8-byte float32
 * SUM all-reduce called the way a user's loop calls it (`Comm.create` with the default
 * configuration, a `runBlocking` coroutine, one fresh tensor, no warm-up of any kind), timed in
 * windows from the very first call on.
 *
 * Per rank: calls 1..[FIRST] in windows of [WINDOW] calls, then [MIDDLE] more, then [STEADY] calls
 * timed as the steady state. Each window's time is the mean per call; the max over ranks is what
 * rank 0 prints, one CSV line per figure:
 *
 * `first_calls,<backend>,<world>,<figure>,<us_per_call>` with figures `create_ms` (the
 * communicator's creation), `call1_us` (the very first call), `first20k` (mean of the first 20,000
 * calls), `w<k>` (window k of the first 20,000), `first200k` (mean of the first 200,000) and `steady`
 * (mean of [STEADY] calls after 1,000,000), then `ratio_first20k` = first20k / steady.
 *
 * Run under `mpirun -np 2 java ... dev.tpcomm.bench.FirstCallsBench mpi` or in one JVM as
 * `FirstCallsBench local 4` (an in-process world of 4 ranks); `FirstCallsBench none` is the floor:
 * the same loop calling a communicator that only adds 1 to the tensor's first element, so what its
 * first calls cost is the JIT's price for the caller's own loop, with no library call. JVM flags
 * are the caller's: the point is to compare them (an AOT cache, compiler settings) in fresh JVMs.
 * The configuration is the environment's (`CommConfig.fromEnvironment`, in-process too), so
 * `TPCOMM_WARM_UP_SECONDS` measures `CommConfig.warmUp`, whose time counts in `create_ms`.
 */
public object FirstCallsBench {
    private const val WINDOW = 1_000
    private const val FIRST = 20_000
    private const val MIDDLE = 180_000
    private const val UNTIL_STEADY = 800_000
    private const val STEADY = 400_000

    /** `FirstCallsBench mpi|local [world]|none`; see the object's documentation. */
    @JvmStatic
    public fun main(args: Array<String>) {
        val backend = args.getOrNull(0) ?: "mpi"
        val code = when (backend) {
            "local" -> {
                val world = args.getOrNull(1)?.toInt() ?: 4
                val t0 = System.nanoTime()
                runBlocking {
                    runLocalWorld(world, CommConfig.fromEnvironment().copy(worldSize = world, rank = 0)) { comm -> measure(comm, "local", t0) }
                }
                0
            }
            // The floor: the same loop calling a communicator whose allReduce only adds 1 to the
            // first element (no library call at all), so its first calls are what the JIT charges
            // for the caller's own loop and call site.
            "none" -> {
                val t0 = System.nanoTime()
                runBlocking {
                    runLocalWorld(1) { real ->
                        val bare = object : Communicator by real {
                            override suspend fun allReduce(tensor: Tensor, op: ReduceOp): Tensor {
                                tensor.setDouble(0, tensor.getDouble(0) + 1.0)
                                return tensor
                            }
                        }
                        measure(bare, "none", t0, figuresBy = real)
                    }
                }
                0
            }
            else -> runBlocking {
                val t0 = System.nanoTime()
                val comm = Comm.create(backend)
                comm.use { measure(it, backend, t0) }
                0
            }
        }
        exitProcess(code)
    }

    private suspend fun measure(comm: Communicator, backend: String, t0: Long, figuresBy: Communicator = comm) {
        val createdMs = (System.nanoTime() - t0) / 1e6
        val t = Tensor.zeros(DType.Float32, 2)
        val figures = LinkedHashMap<String, Double>()
        val first = System.nanoTime()
        comm.allReduce(t)
        figures["call1_us"] = (System.nanoTime() - first) / 1e3
        var windowStart = System.nanoTime()
        val windows = DoubleArray(FIRST / WINDOW)
        for (k in 1 until FIRST) {
            comm.allReduce(t)
            if ((k + 1) % WINDOW == 0) {
                val now = System.nanoTime()
                windows[(k + 1) / WINDOW - 1] = (now - windowStart) / 1e3 / WINDOW
                windowStart = now
            }
        }
        figures["first20k"] = (System.nanoTime() - first) / 1e3 / FIRST
        for (k in 0 until MIDDLE) comm.allReduce(t)
        figures["first200k"] = (System.nanoTime() - first) / 1e3 / (FIRST + MIDDLE)
        for (k in 0 until UNTIL_STEADY) comm.allReduce(t)
        val s0 = System.nanoTime()
        for (k in 0 until STEADY) comm.allReduce(t)
        figures["steady"] = (System.nanoTime() - s0) / 1e3 / STEADY
        windows.forEachIndexed { i, w -> figures["w${i + 1}"] = w }
        figures["create_ms"] = createdMs
        // The max over ranks of every figure, in one call.
        val all = Tensor.of(figures.values.toDoubleArray())
        figuresBy.allReduce(all, ReduceOp.Max)
        val names = figures.keys.toList()
        if (comm.rank == 0) {
            for (i in names.indices) println("first_calls,$backend,${comm.worldSize},${names[i]},%.3f".format(all.getDouble(i.toLong())))
            println("first_calls,$backend,${comm.worldSize},ratio_first20k,%.2f".format(all.getDouble(names.indexOf("first20k").toLong()) / all.getDouble(names.indexOf("steady").toLong())))
        }
        all.close()
        t.close()
    }
}
