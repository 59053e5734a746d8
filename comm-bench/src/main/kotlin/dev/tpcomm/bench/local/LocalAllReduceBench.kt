package dev.tpcomm.bench.local

import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext
import java.lang.management.ManagementFactory

/**
 * The in-process backend's float32 all-reduce, called as users call it (`runLocalWorld`, a plain
 * coroutine per rank, one tensor reused), in one of three modes:
 *
 * - `cpu [world] [bytes]`: the CPU time of the calling thread per all-reduce (8 bytes by default)
 *   with every rank on that one thread (the whole collective's cost; robust on a loaded machine,
 *   since a thread's CPU time does not count the time others ran). 7 rounds after a warm-up
 *   (200,000 calls per round at 8 bytes, fewer for larger sizes).
 * - `alloc [world]`: bytes allocated per 8-byte collective (all ranks on one thread).
 * - `wall [world] [bytes...]` (the default): wall time per all-reduce with the ranks on
 *   `Dispatchers.Default`, the slowest rank's, median of 5 rounds after a JIT warm-up.
 *
 * Run: `java --add-modules=jdk.incubator.vector -cp <comm-bench classpath> dev.tpcomm.bench.local.LocalAllReduceBench [mode] [world] [bytes...]`.
 * Prints one line per figure: median, min and max over the rounds.
 */
public object LocalAllReduceBench {
    /** Entry point; see the object's documentation. */
    @JvmStatic
    public fun main(args: Array<String>): Unit = runBlocking {
        val mode = args.getOrElse(0) { "wall" }
        val world = args.getOrElse(1) { "4" }.toInt()
        when (mode) {
            "cpu" -> cpu(world, args.getOrNull(2)?.toLong() ?: 8L)
            "alloc" -> alloc(world)
            "wall" -> wall(world, args.drop(2).map { it.toLong() }.ifEmpty { listOf(8L, 1024L, 65536L, 1L shl 20, 16L shl 20) })
            else -> throw IllegalArgumentException("mode must be cpu, alloc or wall, got $mode")
        }
    }

    private suspend fun cpu(world: Int, bytes: Long) {
        val mx = ManagementFactory.getThreadMXBean()
        val calls = (200_000L * 8 / bytes).coerceIn(200L, 200_000L).toInt()
        val results = ArrayList<Double>()
        repeat(7) {
            runLocalWorld(world) { comm ->
                val t = Tensor.zeros(DType.Float32, (bytes / 4).toInt())
                repeat(calls / 4 + 100) { comm.allReduce(t) }
                comm.barrier()
                val before = mx.currentThreadCpuTime
                repeat(calls) { comm.allReduce(t) }
                comm.barrier()
                if (comm.rank == 0) results.add((mx.currentThreadCpuTime - before) / calls.toDouble())
            }
        }
        results.sort()
        println("cpu ns per $bytes-byte all-reduce (world $world, one thread): median=${"%.0f".format(results[3])} min=${"%.0f".format(results[0])} max=${"%.0f".format(results[6])}")
    }

    private suspend fun alloc(world: Int) {
        val mx = ManagementFactory.getThreadMXBean() as com.sun.management.ThreadMXBean
        runLocalWorld(world) { comm ->
            val t = Tensor.zeros(DType.Float32, 2)
            repeat(50_000) { comm.allReduce(t) }
            comm.barrier()
            val before = mx.getThreadAllocatedBytes(Thread.currentThread().threadId())
            repeat(100_000) { comm.allReduce(t) }
            comm.barrier()
            if (comm.rank == 0) println("bytes allocated per 8-byte all-reduce (world $world, one thread): ${(mx.getThreadAllocatedBytes(Thread.currentThread().threadId()) - before) / 100_000.0}")
        }
    }

    private suspend fun wall(world: Int, sizes: List<Long>) {
        for (bytes in sizes) {
            val n = (bytes / 4).toInt()
            val iters = when {
                bytes <= 1024 -> 100_000
                bytes <= 65536 -> 10_000
                bytes <= (1 shl 20) -> 2_000
                else -> 20
            }
            val rounds = ArrayList<Double>()
            repeat(5) {
                rounds += withContext(Dispatchers.Default) {
                    runLocalWorld(world, CommConfig(flightRecorderSize = 256)) { comm ->
                        val t = Tensor.zeros(DType.Float32, n)
                        repeat(if (bytes <= 65536) 20_000 else if (bytes <= (1 shl 20)) 1000 else 3) { comm.allReduce(t) } // JIT warm-up
                        comm.barrier()
                        val start = System.nanoTime()
                        repeat(iters) { comm.allReduce(t) }
                        (System.nanoTime() - start) / 1000.0 / iters
                    }.max()
                }
            }
            rounds.sort()
            println("bytes=$bytes world=$world us/op median=${"%.3f".format(rounds[2])} min=${"%.3f".format(rounds[0])} max=${"%.3f".format(rounds[4])}")
        }
    }
}
