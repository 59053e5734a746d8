package dev.tpcomm.bench.local

import dev.tpcomm.allGatherObject
import dev.tpcomm.coroutines.runLocalWorld
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext

/**
 * The in-process backend's `allGatherObject` of a short string per rank, called as users call it
 * (`runLocalWorld`, a plain coroutine per rank, default settings): wall time per call, the slowest
 * rank's, over 5 rounds of [CALLS] calls after a warm-up round, with the ranks on `Dispatchers.Default`.
 * An object collective is two collectives (the encoded lengths, then the padded bytes) plus JSON
 * encoding and decoding; this is what one costs end to end.
 *
 * Run: `java --add-modules=jdk.incubator.vector -cp <comm-bench classpath> dev.tpcomm.bench.local.LocalObjectBench [world]`.
 * Prints one line: median, min and max over the rounds, in microseconds per call.
 */
public object LocalObjectBench {
    private const val CALLS = 20_000
    private const val ROUNDS = 5

    /** Entry point; see the object's documentation. */
    @JvmStatic
    public fun main(args: Array<String>): Unit = runBlocking {
        val world = args.getOrElse(0) { "4" }.toInt()
        val results = ArrayList<Double>()
        repeat(ROUNDS + 1) { round ->
            val times = withContext(Dispatchers.Default) {
                runLocalWorld(world) { comm ->
                    val value = "rank-${comm.rank}-value"
                    comm.barrier()
                    val start = System.nanoTime()
                    repeat(CALLS) { check(comm.allGatherObject(value).size == world) }
                    comm.barrier()
                    (System.nanoTime() - start) / 1000.0 / CALLS
                }
            }
            if (round > 0) results.add(times.max()) // round 0 warms the JIT up
        }
        results.sort()
        println(
            "allGatherObject(String) world $world: median=${"%.2f".format(results[ROUNDS / 2])} min=${"%.2f".format(results[0])} " +
                "max=${"%.2f".format(results[ROUNDS - 1])} us per call",
        )
    }
}
