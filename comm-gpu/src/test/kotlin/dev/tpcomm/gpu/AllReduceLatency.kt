package dev.tpcomm.gpu

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import java.util.Locale

/**
 * What a user's loop of small all-reduces costs on a GPU from a fresh JVM: [calls] in-place float32
 * sums of [bytes] on one device tensor, each awaited (`comm.allReduce(t)` from a plain coroutine,
 * default configuration), timed in blocks of [block] calls, so the first calls (class loading, the
 * interpreter, C1, C2) show beside the steady state. Rank 0 prints one line per block
 * (`latency <impl> <bytes> <first call> <block end> <us/call>`) and a summary: the mean of the first
 * 20,000 calls, the median of the last five blocks, and their ratio. [AllReduceSweep]'s 20 warm-up
 * calls leave the JIT cold, so its small sizes measure a warming JVM; this measures both.
 */
public object AllReduceLatency {
    public suspend fun run(comm: Communicator, copies: DeviceCopies, impl: String, bytes: Long = 8, calls: Int = 200_000, block: Int = 10_000,
                           out: (String) -> Unit = ::println): Double {
        val t = copies.upload(Tensor.zeros(DType.Float32, (bytes / 4).toInt().coerceAtLeast(1)))
        comm.barrier()
        val perBlock = ArrayList<Double>()
        var done = 0
        var first20k = 0.0
        while (done < calls) {
            val n = minOf(block, calls - done)
            val start = System.nanoTime()
            repeat(n) { comm.allReduce(t) }
            val us = (System.nanoTime() - start) / 1000.0 / n
            if (done < 20_000) first20k += us * minOf(n, 20_000 - done)
            perBlock += us
            if (comm.rank == 0) out(String.format(Locale.ROOT, "latency %s %d %d %d %.3f", impl, bytes, done + 1, done + n, us))
            done += n
        }
        val last = perBlock.takeLast(5).sorted()
        val steady = last[last.size / 2]
        val firstMean = first20k / minOf(20_000, calls)
        if (comm.rank == 0) out(String.format(Locale.ROOT, "latency %s %d summary: first 20,000 calls %.3f us/call, steady (median of the last 5 blocks) %.3f us/call, ratio %.2f",
            impl, bytes, firstMean, steady, firstMean / steady))
        t.close()
        return steady
    }
}
