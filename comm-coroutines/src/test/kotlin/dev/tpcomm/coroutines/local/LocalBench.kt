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
 * with mode `default` (ranks on Dispatchers.Default), `single` (ranks on the runBlocking thread) or `cpu`
 * (the thread CPU time per collective of a single-thread world: robust on a loaded machine).
 */
object LocalBench {
    @JvmStatic
    fun main(args: Array<String>) = runBlocking {
        val mode = args.getOrElse(0) { "default" }
        val world = args.getOrElse(1) { "4" }.toInt()
        val sizes = args.drop(2).map { it.toLong() }.ifEmpty { listOf(8L, 1024L, 65536L, 1L shl 20, 16L shl 20, 64L shl 20) }
        if (mode == "alloc") {
            // bytes allocated per 8-byte all-reduce (per collective, all 4 ranks on this thread)
            val mx = java.lang.management.ManagementFactory.getThreadMXBean() as com.sun.management.ThreadMXBean
            runLocalWorld(4) { comm ->
                val t = Tensor.zeros(DType.Float32, 2)
                repeat(50_000) { comm.allReduce(t) }
                comm.barrier()
                val before = mx.getThreadAllocatedBytes(Thread.currentThread().threadId())
                repeat(100_000) { comm.allReduce(t) }
                comm.barrier()
                if (comm.rank == 0) println("bytes allocated per collective (4 ranks): ${(mx.getThreadAllocatedBytes(Thread.currentThread().threadId()) - before) / 100_000.0}")
            }
            return@runBlocking
        }
        if (mode == "cpu") {
            // CPU time (not wall time: robust on a loaded machine) per 8-byte all-reduce, every rank on
            // this one thread, so the figure is the whole collective's CPU cost across the ranks.
            val mx = java.lang.management.ManagementFactory.getThreadMXBean()
            val w = args.getOrElse(1) { "4" }.toInt()
            val results = ArrayList<Double>()
            repeat(7) {
                runLocalWorld(w) { comm ->
                    val t = Tensor.zeros(DType.Float32, 2)
                    repeat(50_000) { comm.allReduce(t) }
                    comm.barrier()
                    val before = mx.currentThreadCpuTime
                    repeat(200_000) { comm.allReduce(t) }
                    comm.barrier()
                    if (comm.rank == 0) results.add((mx.currentThreadCpuTime - before) / 200_000.0)
                }
            }
            results.sort()
            println("cpu ns per collective (world $w, one thread): median=${"%.0f".format(results[3])} min=${"%.0f".format(results[0])} max=${"%.0f".format(results[6])}")
            return@runBlocking
        }
        if (mode == "recorder") {
            val rec = dev.tpcomm.coroutines.FlightRecorder(256, 0, "local")
            repeat(5) {
                val s = System.nanoTime()
                repeat(1_000_000) { rec.start("allReduce", DType.Float32, null, 8, reduceOp = dev.tpcomm.ReduceOp.Sum).complete() }
                println("recorder start+complete: ${(System.nanoTime() - s) / 1_000_000.0} ns")
            }
            return@runBlocking
        }
        if (mode == "kernel") {
            for (bytes in listOf(1L shl 20, 64L shl 20)) {
                val n = bytes / 4
                val ts = List(4) { Tensor.zeros(DType.Float32, n.toInt()) }
                val segs = Array<java.lang.foreign.MemorySegment?>(4) { ts[it].segment }
                val iters = if (bytes < (8 shl 20)) 2000 else 20
                for (threads in listOf(1, 2)) {
                    val times = ArrayList<Double>()
                    repeat(7) {
                        val s = System.nanoTime()
                        repeat(iters) {
                            if (threads == 1) ReduceKernels.reduce(DType.Float32, dev.tpcomm.ReduceOp.Sum, 4, segs, 0, segs, 4, 0, n)
                            else object : ParallelWork(((n + 16383) / 16384).toInt()) {
                                override fun runUnit(unit: Int) {
                                    val from = unit * 16384L
                                    ReduceKernels.reduce(DType.Float32, dev.tpcomm.ReduceOp.Sum, 4, segs, from, segs, 4, from, minOf(16384L, n - from))
                                }
                            }.execute(1)
                        }
                        times.add((System.nanoTime() - s) / 1000.0 / iters)
                    }
                    times.sort()
                    println("kernel bytes=$bytes threads=$threads us/op median=${"%.1f".format(times[3])} min=${"%.1f".format(times[0])}")
                }
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
                        repeat(if (bytes <= 65536) 20_000 else if (bytes <= (1 shl 20)) 1000 else 3) { comm.allReduce(t) } // warm-up (JIT)
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
