package dev.tpcomm.coroutines.local

import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext

/**
 * A quick measurement (not a test; run by hand): µs per all-reduce on 4 ranks at several sizes.
 * `java -cp <test classpath> --add-modules=jdk.incubator.vector dev.tpcomm.coroutines.local.LocalBench [mode]`
 * with mode `default` (ranks on Dispatchers.Default) or `single` (ranks on the runBlocking thread).
 */
object LocalBench {
    @JvmStatic
    fun main(args: Array<String>) = runBlocking {
        val mode = args.getOrElse(0) { "default" }
        val world = args.getOrElse(1) { "4" }.toInt()
        val sizes = args.drop(2).map { it.toLong() }.ifEmpty { listOf(8L, 1024L, 65536L, 1L shl 20, 16L shl 20, 64L shl 20) }
        if (mode == "recorder") {
            val rec = dev.tpcomm.coroutines.FlightRecorder(256, 0, "local")
            repeat(5) {
                val s = System.nanoTime()
                repeat(1_000_000) { rec.start("allReduce", "Float32", null, 8, null, "Sum").complete() }
                println("recorder start+complete: ${(System.nanoTime() - s) / 1_000_000.0} ns")
            }
            return@runBlocking
        }
        println("vector=${ReduceKernels.vectorAvailable} threads=${ParallelWork.parallelism} mode=$mode world=$world")
        for (bytes in sizes) {
            val n = (bytes / 4).toInt()
            val iters = when {
                bytes <= 1024 -> 100_000
                bytes <= 65536 -> 10_000
                bytes <= (1 shl 20) -> 2_000
                else -> 20
            }
            val medians = ArrayList<Double>()
            repeat(5) {
                val block: suspend () -> Double = {
                    runLocalWorld(world, CommConfig(flightRecorderSize = 256)) { comm ->
                        val t = Tensor.zeros(DType.Float32, n)
                        repeat(if (bytes <= 65536) 20_000 else 3) { comm.allReduce(t) } // warm-up
                        comm.barrier()
                        val start = System.nanoTime()
                        repeat(iters) { comm.allReduce(t) }
                        (System.nanoTime() - start) / 1000.0 / iters
                    }.max()
                }
                medians.add(if (mode == "single") block() else withContext(Dispatchers.Default) { block() })
            }
            medians.sort()
            println("bytes=$bytes us/op median=${"%.3f".format(medians[2])} min=${"%.3f".format(medians[0])} max=${"%.3f".format(medians[4])}")
        }
    }
}
