package dev.tpcomm.examples

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.allReduceAsync
import dev.tpcomm.coroutines.reduceScatterIntoAsync
import kotlinx.coroutines.Deferred
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.coroutineScope
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

/**
 * The Megatron-style tensor-parallel MLP block `Y = GeLU(X W1 + b1) W2 + b2` on one rank of [comm].
 *
 * - W1 is split by columns (column-parallel): rank `r` holds columns `[r F/n, (r+1) F/n)` and the
 *   matching slice of b1; GeLU runs on the rank's slice alone.
 * - W2 is split by rows (row-parallel): rank `r` holds the same rows, so its product is a partial
 *   sum of `Y`; b2 is replicated.
 * - Plain mode: the input `X` is replicated. Forward: `f` = identity, `g` = all-reduce of the
 *   partial `Y`. Backward: `g` = identity, `f` = all-reduce of the partial input gradient `dX`.
 * - Sequence-parallel mode: `X`, `Y` and their gradients are split along the sequence (row blocks).
 *   Forward: all-gather `X` along the sequence before W1, reduce-scatter the partial `Y` after W2.
 *   Backward: all-gather `dY`, reduce-scatter `dX`; b2's gradient (a sum over the sequence) is
 *   all-reduced.
 * - Overlap ([overlap] true): collectives are started with the async helpers of comm-coroutines
 *   (`allReduceAsync`, `reduceScatterIntoAsync`: issued at once, in program order on every rank) and awaited only when
 *   their result is needed: the `dX` collective runs while W1's weight gradient is computed, b2's
 *   gradient and the loss reduction run behind the backward pass, and in plain mode the forward
 *   all-reduce is pipelined over two row blocks of `Y`.
 *
 * Every rank must call the same methods in the same order (they are collective). Not thread-safe.
 * A failing collective propagates its exception (the communicator is then aborted on every rank).
 */
public class TensorParallelMlp(
    private val comm: Communicator,
    private val config: MlpConfig,
    initial: MlpWeights,
    public val sequenceParallel: Boolean,
    public var overlap: Boolean,
) : AutoCloseable {
    private val world = comm.worldSize
    private val rank = comm.rank
    private val h = config.hidden
    private val n = config.rows
    private val fl = config.ffn / world
    private val nl = if (sequenceParallel) n / world else n

    init {
        config.checkShardable(world, sequenceParallel)
    }

    /** This rank's shard of W1 (`hidden x ffn/world`). */
    public val w1: FloatArray = MatMul.columns(initial.w1, h, config.ffn, rank * fl, fl)

    /** This rank's shard of b1 (`ffn/world`). */
    public val b1: FloatArray = initial.b1.copyOfRange(rank * fl, (rank + 1) * fl)

    /** This rank's shard of W2 (`ffn/world x hidden`). */
    public val w2: FloatArray = initial.w2.copyOfRange(rank * fl * h, (rank + 1) * fl * h)

    /** b2, replicated. */
    public val b2: FloatArray = initial.b2.copyOf()

    private val x = FloatArray(n * h)
    private val z = FloatArray(n * fl)
    private val a = FloatArray(n * fl)
    private val y = FloatArray(nl * h)
    private val dy = FloatArray(n * h)
    private val da = FloatArray(n * fl)
    private val dz = FloatArray(n * fl)
    private val dxPart = FloatArray(n * h)
    private val dw1 = FloatArray(h * fl)
    private val dw2 = FloatArray(fl * h)
    private val db1 = FloatArray(fl)
    private val scratch = FloatArray(fl * h)
    private val partial = FloatArray(n * h)
    private val dyl = FloatArray(nl * h)

    // Communication buffers, allocated once.
    private val partialT = Tensor.zeros(DType.Float32, n, h)        // partial Y (plain: all-reduced in place)
    private val dxT = Tensor.zeros(DType.Float32, n, h)             // partial dX
    private val localT = Tensor.zeros(DType.Float32, nl, h)         // SP: this rank's X / Y / dY / dX shard
    private val fullT = Tensor.zeros(DType.Float32, n, h)           // SP: gathered X or dY
    private val db2T = Tensor.zeros(DType.Float32, h)
    private val lossT = Tensor.zeros(DType.Float64, 1)

    /** This rank's part of the input gradient from the last [step]: all of `dX` (plain) or its sequence shard (SP). */
    public val inputGrad: FloatArray = FloatArray(nl * h)

    /** The output of the last [step]: all of `Y` (plain) or this rank's sequence shard (SP). */
    public val output: FloatArray get() = y

    /**
     * One SGD step on the batch ([xFull], [tFull]) (`rows x hidden`, the same on every rank; in
     * sequence-parallel mode each rank uses only its row block). Collective. Returns the loss of the
     * whole batch before the update, the same on every rank.
     */
    public suspend fun step(xFull: FloatArray, tFull: FloatArray): Float = coroutineScope {
        val r0 = if (sequenceParallel) rank * nl else 0
        // ---------------------------------------------------------------- forward
        if (sequenceParallel) {
            put(localT, xFull, r0 * h, nl * h)
            comm.allGatherInto(fullT, localT, 0)          // g-bar: all-gather along the sequence
            get(fullT, x, 0, n * h)
        } else {
            System.arraycopy(xFull, 0, x, 0, n * h)       // f: identity
        }
        MatMul.mm(x, w1, z, n, h, fl)
        DenseMlp.addRowVector(z, b1, n, fl)
        Gelu.forward(z, a)
        if (!sequenceParallel && overlap && n % 2 == 0) {
            // Pipeline: all-reduce the first row block while the second is computed.
            val blocks = partialT.chunk(2, 0)
            val half = n / 2
            val pending = ArrayList<Deferred<Tensor>>(2)
            for (b in 0 until 2) {
                MatMul.mm(a, w2, partial, half, fl, h, aRow = b * half, cRow = b * half)
                put(blocks[b], partial, b * half * h, half * h)
                pending += allReduceAsync(comm, blocks[b])
            }
            pending.awaitAll()
            get(partialT, y, 0, n * h)
        } else {
            MatMul.mm(a, w2, partial, n, fl, h)
            put(partialT, partial, 0, n * h)
            if (sequenceParallel) {
                comm.reduceScatterInto(localT, partialT, ReduceOp.Sum, 0)   // g: reduce-scatter along the sequence
                get(localT, y, 0, nl * h)
            } else {
                comm.allReduce(partialT)                                    // g: all-reduce
                get(partialT, y, 0, n * h)
            }
        }
        DenseMlp.addRowVector(y, b2, nl, h)

        // ---------------------------------------------------------------- loss
        var sq = 0.0
        val inv = 1f / n
        for (i in 0 until nl * h) {
            val d = y[i] - tFull[r0 * h + i]
            sq += d.toDouble() * d
            dyl[i] = d * inv
        }
        lossT.setDouble(0, sq)
        val lossJob = if (sequenceParallel) allReduceAsync(comm, lossT) else null
        if (!overlap) lossJob?.await()

        // ---------------------------------------------------------------- backward
        val db2 = DenseMlp.columnSums(dyl, nl, h)
        var db2Job: Deferred<Tensor>? = null
        if (sequenceParallel) {
            put(db2T, db2, 0, h)
            db2Job = allReduceAsync(comm, db2T)   // b2's gradient sums over the sequence
            if (!overlap) db2Job.await()
            put(localT, dyl, 0, nl * h)
            comm.allGatherInto(fullT, localT, 0)          // backward of reduce-scatter: all-gather dY
            get(fullT, dy, 0, n * h)
        } else {
            System.arraycopy(dyl, 0, dy, 0, n * h)        // backward of all-reduce: identity
        }
        MatMul.mmTransA(a, dy, dw2, n, fl, h)
        MatMul.mmTransB(dy, w2, da, n, h, fl, scratch)
        Gelu.backward(z, da, dz)
        MatMul.mmTransB(dz, w1, dxPart, n, fl, h, scratch)
        put(dxT, dxPart, 0, n * h)
        // backward of f: all-reduce dX (plain) or reduce-scatter it (SP), overlapped with W1's gradient.
        val dxJob = if (sequenceParallel) reduceScatterIntoAsync(comm, localT, dxT) else allReduceAsync(comm, dxT)
        if (!overlap) dxJob.await()
        MatMul.mmTransA(x, dz, dw1, n, h, fl)
        DenseMlp.columnSums(dz, n, fl, db1)
        get(dxJob.await(), inputGrad, 0, nl * h)
        if (db2Job != null) {
            get(db2Job.await(), db2, 0, h)
        }
        DenseMlp.sgd(w1, dw1, config.lr)
        DenseMlp.sgd(b1, db1, config.lr)
        DenseMlp.sgd(w2, dw2, config.lr)
        DenseMlp.sgd(b2, db2, config.lr)
        val total = lossJob?.await()?.getDouble(0) ?: sq
        (total / (2.0 * n)).toFloat()
    }

    /**
     * Collective: the full parameters, gathered from every rank's shards (W1 along its columns,
     * b1 and W2 along their rows), on every rank.
     */
    public suspend fun gatherWeights(): MlpWeights {
        val w1Full = comm.allGather(Tensor.of(w1, h, fl), 1).toFloatArray()
        val b1Full = comm.allGather(Tensor.of(b1, fl), 0).toFloatArray()
        val w2Full = comm.allGather(Tensor.of(w2, fl, h), 0).toFloatArray()
        return MlpWeights(w1Full, b1Full, w2Full, b2.copyOf())
    }

    /** Collective: the full [output] (`rows x hidden`) on every rank. */
    public suspend fun gatherOutput(): FloatArray =
        if (sequenceParallel) comm.allGather(Tensor.of(y, nl, h), 0).toFloatArray() else y.copyOf()

    /** Collective: the full input gradient of the last step on every rank. */
    public suspend fun gatherInputGrad(): FloatArray =
        if (sequenceParallel) comm.allGather(Tensor.of(inputGrad, nl, h), 0).toFloatArray() else inputGrad.copyOf()

    /** Frees the communication buffers. The communicator stays open. */
    override fun close() {
        listOf(partialT, dxT, localT, fullT, db2T, lossT).forEach { it.close() }
    }

    private companion object {
        private val F32 = ValueLayout.JAVA_FLOAT_UNALIGNED

        fun put(t: Tensor, src: FloatArray, off: Int, len: Int) =
            MemorySegment.copy(src, off, t.segment, F32, 0L, len)

        fun get(t: Tensor, dst: FloatArray, off: Int, len: Int) =
            MemorySegment.copy(t.segment, F32, 0L, dst, off, len)
    }
}
