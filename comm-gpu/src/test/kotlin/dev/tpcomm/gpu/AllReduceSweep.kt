package dev.tpcomm.gpu

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.coroutineScope

/**
 * The all-reduce sweep of the GPU check, with the protocol that `scripts/gpu/nccl_allreduce.cu`
 * (C calling NCCL) and `scripts/gpu/torch_allreduce.py` (`torch.distributed`) follow too, so
 * `scripts/gpu/sweep_report.py` can put the four side by side:
 *
 * - float32 sum, in place, sizes [MIN_BYTES] to [maxBytes] doubling;
 * - per size and mode, [WARMUP] calls, then [ROUNDS] rounds of `iters` calls ([itersFor]), each round
 *   reported as microseconds per call;
 * - `each`: every call is waited for on the host before the next is issued (a suspended
 *   `allReduce`; `cudaStreamSynchronize` in C; `torch.cuda.synchronize()`);
 * - `pipelined`: the round's calls are issued back to back and waited for once at the end (several
 *   `allReduce`s in flight; nccl-tests' way).
 *
 * Output, rank 0 only, one line per size and mode: `sweep <impl> <mode> <bytes> <us round 1> ... <us round N>`.
 *
 * What the times are depends on the world (the bundle's report says it in its title): at world 1 an
 * in-place float32 sum launches nothing in NCCL (`taskAppend` hands a single-rank collective to
 * `ncclLaunchOneRank`, NVIDIA/nccl `src/enqueue.cc` and `src/device/onerank.cu`, which returns
 * before any CUDA call when the buffers are the same and the op is not a pre-multiplied sum), so
 * they are each implementation's host overhead per call; at world 2 on one GPU two processes' NCCL
 * kernels exchange through the same device, which is NCCL's two-rank path, not two GPUs' bandwidth.
 */
public object AllReduceSweep {
    public const val MIN_BYTES: Long = 8
    public const val MAX_BYTES: Long = 256L shl 20
    public const val WARMUP: Int = 20
    public const val ROUNDS: Int = 5

    /** Calls per timed round: more where a call is short. */
    public fun itersFor(bytes: Long): Int = if (bytes < (1L shl 20)) 100 else 20

    /** Runs the sweep on [comm] with device tensors from [copies]; returns the lines printed (rank 0) or none. */
    public suspend fun run(
        comm: Communicator,
        copies: DeviceCopies,
        impl: String,
        maxBytes: Long = MAX_BYTES,
        out: (String) -> Unit = ::println,
    ): List<String> {
        val lines = ArrayList<String>()
        var bytes = MIN_BYTES
        while (bytes <= maxBytes) {
            val t = copies.upload(Tensor.zeros(DType.Float32, (bytes / 4).toInt()))
            val iters = itersFor(bytes)
            for (mode in listOf("each", "pipelined")) {
                val call: suspend (Int) -> Unit = if (mode == "each") {
                    { n -> repeat(n) { comm.allReduce(t) } }
                } else {
                    { n -> coroutineScope { List(n) { async(start = CoroutineStart.UNDISPATCHED) { comm.allReduce(t) } }.awaitAll() } }
                }
                call(WARMUP)
                comm.barrier()
                val rounds = DoubleArray(ROUNDS) {
                    val start = System.nanoTime()
                    call(iters)
                    (System.nanoTime() - start) / 1000.0 / iters
                }
                if (comm.rank == 0) {
                    val line = "sweep $impl $mode $bytes " + rounds.joinToString(" ") { String.format(java.util.Locale.ROOT, "%.3f", it) }
                    out(line)
                    lines += line
                }
            }
            bytes *= 2
        }
        return lines
    }
}
