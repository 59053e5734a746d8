@file:JvmName("OverlapBenchmark")

package dev.tpcomm.bench

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.LocalWorld
import dev.tpcomm.coroutines.allReducePipelined
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.ExecutorCoroutineDispatcher
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.cancel
import kotlinx.coroutines.channels.Channel
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.asCoroutineDispatcher
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.util.concurrent.Executors
import java.util.concurrent.locks.LockSupport
import kotlin.math.max

/*
 * Overlap benchmark: is a chunk's all-reduce really hidden behind the next chunk's compute?
 *
 * One step = N chunks. For each chunk, a rank computes and then all-reduces the chunk. Two ranks:
 *
 *   rank 0, measured: its compute is real float arithmetic on the chunk (multiply-add sweeps over
 *     the chunk's elements, the number of sweeps calibrated at start to take `compute` ms);
 *   rank 1, the delayed peer: it stands for a rank on another machine, so its compute is a timed
 *     wait of the same `compute` ms (it must not steal rank 0's CPU on a small machine; with
 *     `--peer arithmetic` it runs the same arithmetic as rank 0 instead), and it
 *     reaches each all-reduce `skew` ms after issuing it, one all-reduce at a time, in issue order
 *     (a serial link with latency).
 *
 * So every all-reduce costs rank 0 about `skew` of waiting: the latency to hide.
 *
 *   compute only        N x compute, no communication
 *   communication only  N all-reduces back to back, no compute
 *   sync step           compute chunk i, then all-reduce chunk i and wait
 *   async step          compute chunk i, start its all-reduce without waiting (allReducePipelined),
 *                       compute chunk i+1 meanwhile; wait for all at the end
 *
 * overlap efficiency = max(compute only, communication only) / async step: 1.0 means the async
 * step costs no more than the longer of its two parts alone.
 *
 * Threads: each rank runs on its own thread (its "compute stream"); the local backend and the
 * delayed rank's link progress the collectives on other threads, as a GPU or an MPI progress
 * thread would. Times are measured on rank 0, after a barrier, median over repeats; the four
 * modes are interleaved in each repeat so machine load affects them alike.
 */

private class Options(
    val chunks: Int,
    val elements: Int,
    val computeMillis: Double,
    val skewMillis: Double,
    val repeats: Int,
    val warmup: Int,
    val peerArithmetic: Boolean,
)

private fun parse(args: Array<String>): Options {
    val map = HashMap<String, String>()
    var i = 0
    while (i < args.size) {
        val a = args[i]
        require(a.startsWith("--") && i + 1 < args.size) {
            "usage: OverlapBenchmark [--chunks 16] [--elements 65536] [--compute-ms 10] [--skew-ms 10] [--repeats 11] [--warmup 3] " +
                "[--peer wait|arithmetic]; got '$a'"
        }
        map[a.removePrefix("--")] = args[i + 1]
        i += 2
    }
    val known = setOf("chunks", "elements", "compute-ms", "skew-ms", "repeats", "warmup", "peer")
    require(map.keys.all { it in known }) { "unknown option(s) ${map.keys - known}; known: $known" }
    fun int(k: String, d: Int) = map[k]?.let { it.toIntOrNull() ?: throw IllegalArgumentException("--$k must be an integer, got '$it'") } ?: d
    fun dbl(k: String, d: Double) = map[k]?.let { it.toDoubleOrNull() ?: throw IllegalArgumentException("--$k must be a number, got '$it'") } ?: d
    val peer = map["peer"] ?: "wait"
    require(peer == "wait" || peer == "arithmetic") { "--peer must be 'wait' or 'arithmetic', got '$peer'" }
    val o = Options(
        int("chunks", 16), int("elements", 65536), dbl("compute-ms", 10.0), dbl("skew-ms", 10.0), int("repeats", 11), int("warmup", 3),
        peerArithmetic = peer == "arithmetic",
    )
    require(o.chunks >= 1 && o.elements >= 1 && o.repeats >= 1 && o.warmup >= 0) { "chunks, elements and repeats must be >= 1, warmup >= 0" }
    require(o.computeMillis > 0 && o.skewMillis >= 0) { "--compute-ms must be > 0 and --skew-ms >= 0" }
    return o
}

/** Per-chunk compute of a rank. */
private interface Compute {
    fun run(chunk: Tensor, seed: Float)
}

/** Real arithmetic on a chunk: [passes] sweeps of a multiply-add over a heap copy, written into the chunk. */
private class Kernel(elements: Int, private val passes: Int = 1) : Compute {
    private val work = FloatArray(elements)

    override fun run(chunk: Tensor, seed: Float) = run(chunk, passes, seed)

    fun run(chunk: Tensor, passes: Int, seed: Float) {
        val w = work
        w.fill(seed)
        repeat(passes) {
            for (i in w.indices) w[i] = w[i] * 0.999f + 0.001f
        }
        MemorySegment.copy(w, 0, chunk.segment, ValueLayout.JAVA_FLOAT_UNALIGNED, 0, w.size)
    }
}

/** The remote peer's compute: the same result as [kernel] (computed once), delivered after a timed wait of [millis]. */
private class TimedPeerCompute(private val kernel: Kernel, private val millis: Double, elements: Int, seed: Float) : Compute {
    private val result = Tensor.zeros(DType.Float32, elements).also { kernel.run(it, seed) }

    override fun run(chunk: Tensor, seed: Float) {
        sleepNanos((millis * 1e6).toLong())
        chunk.copyFrom(result)
    }
}

/** Sleeps [nanos] precisely (park, then spin the last 100 µs). */
private fun sleepNanos(nanos: Long) {
    val end = System.nanoTime() + nanos
    while (true) {
        val left = end - System.nanoTime()
        if (left <= 0) return
        if (left > 100_000) LockSupport.parkNanos(left - 100_000) else Thread.onSpinWait()
    }
}

/**
 * Sweeps of [Kernel.run] that take about [millis] on this machine now. The kernel is first run for a
 * second so the JIT has compiled (and vectorized) it, then timed: median of several trials.
 */
private fun calibrate(elements: Int, millis: Double): Int {
    val k = Kernel(elements)
    val t = Tensor.zeros(DType.Float32, elements)
    val warmEnd = System.nanoTime() + 1_000_000_000L
    while (System.nanoTime() < warmEnd) k.run(t, 10, 1f)
    var trialPasses = 10
    while (true) { // grow the trial until it lasts at least 5 ms, so timer noise does not matter
        val t0 = System.nanoTime()
        k.run(t, trialPasses, 1f)
        if (System.nanoTime() - t0 >= 5_000_000L || trialPasses >= 1 shl 24) break
        trialPasses *= 2
    }
    val perPass = List(7) {
        val t0 = System.nanoTime()
        k.run(t, trialPasses, 1f)
        (System.nanoTime() - t0) / 1e6 / trialPasses
    }.sorted()[3]
    return max(1, Math.round(millis / perPass).toInt())
}

/**
 * Rank 1's view of the world: each all-reduce reaches the real communicator [skewMillis] after it
 * was issued, and all-reduces pass one at a time, in issue order (a serial link with latency).
 * Other calls go straight through; the benchmark makes them only when no all-reduce is pending.
 */
private class DelayedLink(
    private val inner: Communicator,
    private val skewMillis: Double,
    scope: CoroutineScope,
) : Communicator by inner {
    private class Request(val tensor: Tensor, val op: ReduceOp, val issuedNanos: Long, val done: CompletableDeferred<Tensor>)

    private val queue = Channel<Request>(Channel.UNLIMITED)

    init {
        scope.launch {
            for (r in queue) {
                sleepNanos(r.issuedNanos + (skewMillis * 1e6).toLong() - System.nanoTime()) // the link's own thread
                try {
                    r.done.complete(inner.allReduce(r.tensor, r.op))
                } catch (e: Throwable) {
                    r.done.completeExceptionally(e)
                }
            }
        }
    }

    override suspend fun allReduce(tensor: Tensor, op: ReduceOp): Tensor {
        val request = Request(tensor, op, System.nanoTime(), CompletableDeferred())
        queue.trySend(request).getOrThrow() // enqueued synchronously: issue order is call order
        return request.done.await()
    }
}

private enum class Mode(val label: String) { Compute("compute only"), Communication("communication only"), Sync("sync step"), Async("async step") }

/** Runs one step; returns the nanoseconds spent in compute during it. */
private suspend fun step(mode: Mode, comm: Communicator, chunks: List<Tensor>, compute: Compute, seed: Float): Long {
    var computeNanos = 0L
    fun timed(chunk: Tensor) {
        val t0 = System.nanoTime()
        compute.run(chunk, seed)
        computeNanos += System.nanoTime() - t0
    }
    when (mode) {
        Mode.Compute -> chunks.forEach { timed(it) }
        Mode.Communication -> chunks.forEach { comm.allReduce(it) }
        Mode.Sync -> chunks.forEach { timed(it); comm.allReduce(it) }
        Mode.Async -> comm.allReducePipelined(chunks) { _, chunk -> timed(chunk) }
    }
    return computeNanos
}

private fun median(xs: List<Double>): Double = xs.sorted().let { s -> if (s.size % 2 == 1) s[s.size / 2] else (s[s.size / 2 - 1] + s[s.size / 2]) / 2 }

public fun main(args: Array<String>) {
    val o = try {
        parse(args)
    } catch (e: IllegalArgumentException) {
        System.err.println(e.message)
        kotlin.system.exitProcess(2)
    }
    val passes = calibrate(o.elements, o.computeMillis)
    val world = 2
    val rankThreads: List<ExecutorCoroutineDispatcher> = List(world) { r ->
        Executors.newSingleThreadExecutor { Thread(it, "rank-$r").apply { isDaemon = true } }.asCoroutineDispatcher()
    }
    val linkThread = Executors.newSingleThreadExecutor { Thread(it, "rank-1-link").apply { isDaemon = true } }.asCoroutineDispatcher()
    val linkScope = CoroutineScope(SupervisorJob() + linkThread)
    val times = Mode.entries.associateWith { ArrayList<Double>() }
    val ratios = ArrayList<Double>()
    val inStepCompute = ArrayList<Double>()
    val inStepRatios = ArrayList<Double>()
    var checked = 0
    LocalWorld(world).use { localWorld ->
        val comms = List(world) { r ->
            val c = localWorld.communicator(r)
            if (r == 1) DelayedLink(c, o.skewMillis, linkScope) else c
        }
        runBlocking {
            val results = List(world) { r ->
                async(rankThreads[r]) {
                    val comm = comms[r]
                    val kernel = Kernel(o.elements, passes)
                    val compute: Compute = if (r == 0 || o.peerArithmetic) kernel else TimedPeerCompute(kernel, o.computeMillis, o.elements, 1f + r)
                    val chunks = List(o.chunks) { Tensor.zeros(DType.Float32, o.elements) }
                    val mine = HashMap<Mode, MutableList<Double>>()
                    val computeInAsync = ArrayList<Double>()
                    for (rep in 0 until o.warmup + o.repeats) {
                        for (mode in Mode.entries) {
                            comm.barrier()
                            val t0 = System.nanoTime()
                            val computeNanos = step(mode, comm, chunks, compute, seed = 1f + r)
                            val ms = (System.nanoTime() - t0) / 1e6
                            if (rep >= o.warmup) {
                                mine.getOrPut(mode) { ArrayList() } += ms
                                if (mode == Mode.Async) computeInAsync += computeNanos / 1e6
                            }
                        }
                    }
                    // the last step was the async one: every chunk holds the sum over both ranks
                    val expected = Tensor.zeros(DType.Float32, o.elements).also { kernel.run(it, passes, 1f) }.getFloat(0) +
                        Tensor.zeros(DType.Float32, o.elements).also { kernel.run(it, passes, 2f) }.getFloat(0)
                    check(chunks.all { Math.abs(it.getFloat(0) - expected) <= 1e-4f * Math.abs(expected) }) {
                        "rank $r: an all-reduced chunk holds the wrong value"
                    }
                    mine to computeInAsync
                }
            }.awaitAll()
            val rank0 = results[0].first
            inStepCompute += results[0].second
            for (mode in Mode.entries) times.getValue(mode) += rank0.getValue(mode)
            for (i in 0 until o.repeats) {
                val c = rank0.getValue(Mode.Compute)[i]
                val m = rank0.getValue(Mode.Communication)[i]
                ratios += max(c, m) / rank0.getValue(Mode.Async)[i]
                inStepRatios += max(inStepCompute[i], m) / rank0.getValue(Mode.Async)[i]
            }
            checked = results.size
        }
    }
    linkScope.cancel()
    linkThread.close()
    rankThreads.forEach { it.close() }

    println(
        "overlap benchmark: local backend, $world ranks, ${o.chunks} chunks x ${o.elements} float32 (${o.elements * 4L / 1024} KiB) per step; " +
            "compute ${o.computeMillis} ms per chunk (rank 0: arithmetic, $passes sweeps; rank 1: ${if (o.peerArithmetic) "the same arithmetic" else "timed wait"}); " +
            "rank 1 reaches each all-reduce ${o.skewMillis} ms late; " +
            "${o.repeats} repeats after ${o.warmup} warm-up, times on rank 0; results checked on $checked ranks",
    )
    println(String.format("%-20s %10s %10s %10s", "mode", "median ms", "min ms", "max ms"))
    for (mode in Mode.entries) {
        val xs = times.getValue(mode)
        println(String.format("%-20s %10.1f %10.1f %10.1f", mode.label, median(xs), xs.min(), xs.max()))
    }
    val compute = median(times.getValue(Mode.Compute))
    val communication = median(times.getValue(Mode.Communication))
    val sync = median(times.getValue(Mode.Sync))
    val async = median(times.getValue(Mode.Async))
    println(String.format("sync step time  = %.1f ms", sync))
    println(String.format("async step time = %.1f ms", async))
    println(
        String.format(
            "overlap efficiency = max(compute, communication) / async step time = max(%.1f, %.1f) / %.1f = %.3f " +
                "(per-repeat ratios: median %.3f, min %.3f, max %.3f)",
            compute, communication, async, max(compute, communication) / async, median(ratios), ratios.min(), ratios.max(),
        ),
    )
    println(
        String.format(
            "check under load: compute timed inside the async steps, median %.1f ms; max(that, communication) / async step: median %.3f (min %.3f, max %.3f)",
            median(inStepCompute), median(inStepRatios), inStepRatios.min(), inStepRatios.max(),
        ),
    )
    println(String.format("speed-up of async over sync: %.2fx", sync / async))
    println(String.format("machine: %d cores, load average %.2f at the end", Runtime.getRuntime().availableProcessors(),
        java.lang.management.ManagementFactory.getOperatingSystemMXBean().systemLoadAverage))
}
