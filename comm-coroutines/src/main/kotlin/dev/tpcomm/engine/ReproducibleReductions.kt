package dev.tpcomm.engine

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.Reproducible
import dev.tpcomm.spi.CollectiveOp
import java.lang.foreign.MemorySegment

/**
 * The reproducible reductions (docs/reproducible.md): `Sum`, `Avg` and `PreMulSum` of
 * floating-point tensors whose every element is the **correctly rounded** result of the exact
 * sum (or exact sum / n, rounded once), so the bits depend only on the ranks' inputs, never on the
 * world size, the ranks' order, the backend, the algorithm or how the tensor was split into calls.
 *
 * Composed by the front from the backend's own data movement, as one composite operation (one
 * record, one number, issued atomically in call order, its steps signed with it):
 *
 * - all-reduce, small (at most [SMALL_BYTES] per rank, or fewer elements than ranks): `allGather` of
 *   the inputs, then every rank sums every element exactly ([ExactSum]); one collective.
 * - all-reduce, larger: `allToAll` of `n` chunks (rank `r` receives every rank's chunk `r`), exact
 *   sums of its chunk, `allGather` of the chunks: `2 (n-1)/n` of the tensor sent and received per
 *   rank, what a ring all-reduce moves.
 * - reduce: as all-reduce with `gather` to the root in place of the last (or only) step.
 * - on a backend that [CommunicatorBackend.reducesExactly] (in-process, at every size; MPI, when the
 *   composite would gather), all-reduce and reduce of `Sum` and `Avg` are one collective the
 *   backend reduces with [ExactSum] ([ExactReduction]): the same bits, one record, one check.
 * - reduce-scatter (dim 0 or any dim), reduce-scatter-v: one `allToAll`/`allToAllV`, then the
 *   exact sums of this rank's rows.
 *
 * `PreMulSum` scales each rank's own input first (each product rounded once to the dtype), into the
 * staging copy, never the caller's input. Other ops and dtypes (`Max`, `Min`, integers: already
 * exact; `Product`) take the default path.
 */
internal object ReproducibleReductions {
    /** Per-rank bytes at or below which an all-reduce gathers every input (one collective). */
    const val SMALL_BYTES: Long = 16 * 1024

    /** Whether [op] on [dtype] is reduced the reproducible way (the others are exact already, or not covered). */
    fun applies(dtype: DType, op: ReduceOp): Boolean =
        dtype.isFloatingPoint && (op == ReduceOp.Sum || op == ReduceOp.Avg || op is ReduceOp.PreMulSum)

    /**
     * [block] as one composite operation of [comm] when it is a [CommunicatorFront] (recorded once,
     * issued atomically in call order); on another [Communicator] (a third party's), its steps are
     * that communicator's own operations.
     */
    private suspend fun <R> composite(comm: Communicator, op: CollectiveOp, root: Int, reduceOp: ReduceOp, block: suspend () -> R): R =
        if (comm is CommunicatorFront) comm.reproducibleComposite(op, root, reduceOp, block) else block()

    /**
     * Whether [front] reduces [tensor] with [op] in one collective of its own ([ExactReduction]):
     * a host tensor, `Sum` or `Avg`, more than one rank, on a backend that
     * [CommunicatorBackend.reducesExactly] it.
     */
    private fun direct(front: Communicator, tensor: Tensor, op: ReduceOp): Boolean =
        front is CommunicatorFront && front.worldSize > 1 && !tensor.device.isGpu && (op == ReduceOp.Sum || op == ReduceOp.Avg) &&
            front.backend.reducesExactly(tensor, gathers(tensor.numel, tensor.dtype.byteSize.toLong(), front.worldSize))

    /** Whether the composite gathers every rank's whole input: a small tensor, or fewer elements than ranks. */
    private fun gathers(count: Long, elementBytes: Long, n: Int): Boolean = count * elementBytes <= SMALL_BYTES || count < n

    suspend fun allReduce(front: Communicator, tensor: Tensor, op: ReduceOp): Tensor {
        if (direct(front, tensor, op)) return (front as CommunicatorFront).exactReduction(CollectiveOp.AllReduce, tensor, op, -1)
        return composed(front, tensor, op)
    }

    /** [allReduce] as a composite of the backend's data movement (every backend; the bits of [ExactReduction]). */
    suspend fun composed(front: Communicator, tensor: Tensor, op: ReduceOp): Tensor =
        composite(front, CollectiveOp.AllReduce, -1, op) {
            rootedReduce(front, tensor, op, root = -1)
            tensor
        }

    suspend fun reduce(front: Communicator, tensor: Tensor, root: Int, op: ReduceOp): Tensor {
        if (direct(front, tensor, op)) return (front as CommunicatorFront).exactReduction(CollectiveOp.Reduce, tensor, op, root)
        return composite(front, CollectiveOp.Reduce, root, op) {
            rootedReduce(front, tensor, op, root)
            tensor
        }
    }

    /** All-reduce ([root] -1) or reduce to [root]: the result written into [tensor] (on the root only, for reduce). */
    private suspend fun rootedReduce(front: Communicator, tensor: Tensor, op: ReduceOp, root: Int) {
        if (tensor.device.isGpu) return deviceRootedReduce(front, tensor, op, root)
        val n = front.worldSize
        val count = tensor.numel
        if (count == 0L) return
        val dtype = tensor.dtype
        val avg = op == ReduceOp.Avg
        val es = dtype.byteSize.toLong()
        val countInt = Math.toIntExact(count)
        val owned = ArrayList<Tensor>(4)
        try {
            val input = if (op is ReduceOp.PreMulSum) scaled(tensor, op).also { owned += it } else tensor
            if (n == 1) {
                // Nothing to exchange: the "sum" of one value, its special values made canonical.
                ExactSum.reduceRows(dtype, avg, 1, input.segment, count, 0, count, tensor.segment, 0)
                return
            }
            if (gathers(count, es, n)) {
                val flat = input.view(countInt)
                val all = if (root < 0) front.allGather(flat) else front.gather(flat, root)
                if (all != null) {
                    owned += all
                    ExactSum.reduceRows(dtype, avg, n, all.segment, count, 0, count, tensor.segment, 0)
                }
                return
            }
            val chunk = (count + n - 1) / n
            // Two staging buffers kept per communicator: allocating (and freeing) them per call costs more
            // than the exchange at large sizes. The padding past count is never read back.
            val staging = buffer(front, 0, dtype, chunk * n, owned)
            MemorySegment.copy(input.segment, 0, staging.segment, 0, count * es)
            val exchanged = buffer(front, 1, dtype, chunk * n, owned)
            val parts = List(n) { Math.toIntExact(chunk) }
            front.allToAllVInto(exchanged, staging, parts, parts)
            // This rank's chunk of every rank, summed exactly into row 0 (each element reads its n inputs first).
            ExactSum.reduceRows(dtype, avg, n, exchanged.segment, chunk, 0, chunk, exchanged.segment, 0)
            val mine = exchanged.narrow(0, 0, Math.toIntExact(chunk))
            if (root < 0) {
                front.allGatherInto(staging, mine)
                MemorySegment.copy(staging.segment, 0, tensor.segment, 0, count * es)
            } else {
                val all = front.gather(mine, root)
                if (all != null) {
                    owned += all
                    MemorySegment.copy(all.segment, 0, tensor.segment, 0, count * es)
                }
            }
        } finally {
            owned.forEach { it.close() }
            endStaging(front)
        }
    }

    suspend fun reduceScatter(front: Communicator, output: Tensor, input: Tensor, op: ReduceOp, dim: Int): Tensor =
        composite(front, CollectiveOp.ReduceScatter, -1, op) {
            if (input.device.isGpu) return@composite deviceReduceScatter(front, output, input, op, dim, null)
            val n = front.worldSize
            val rows = if (dim == 0) null else input.chunk(n, dim) // copies along other dims, rank-major
            val owned = ArrayList<Tensor>(n + 3)
            try {
                rows?.let { owned += it }
                val staged: Tensor = when {
                    rows == null && op !is ReduceOp.PreMulSum -> input.view(Math.toIntExact(input.numel))
                    else -> {
                        val t = Tensor.zeros(input.dtype, Math.toIntExact(input.numel)).also { owned += it }
                        if (rows == null) {
                            MemorySegment.copy(input.segment, 0, t.segment, 0, input.byteSize)
                        } else {
                            var at = 0L
                            for (r in rows) { MemorySegment.copy(r.segment, 0, t.segment, at, r.byteSize); at += r.byteSize }
                        }
                        if (op is ReduceOp.PreMulSum) ExactSum.scaleInto(t.dtype, op, t.segment, t.segment, t.numel)
                        t
                    }
                }
                exchangeAndSum(front, staged, output, op, null)
            } finally {
                owned.forEach { it.close() }
            }
            output
        }

    suspend fun reduceScatterV(front: Communicator, output: Tensor, input: Tensor, sizes: List<Int>, op: ReduceOp): Tensor =
        composite(front, CollectiveOp.ReduceScatterV, -1, op) {
            if (input.device.isGpu) return@composite deviceReduceScatter(front, output, input, op, 0, sizes)
            val owned = ArrayList<Tensor>(2)
            try {
                val staged = if (op is ReduceOp.PreMulSum) scaled(input, op).also { owned += it } else input
                exchangeAndSum(front, staged, output, op, sizes)
            } finally {
                owned.forEach { it.close() }
            }
            output
        }

    /**
     * [staged] holds `n` rank-major parts (equal, or [sizes] rows each): exchanged so this rank holds
     * every rank's part for it, summed exactly into [output].
     */
    private suspend fun exchangeAndSum(front: Communicator, staged: Tensor, output: Tensor, op: ReduceOp, sizes: List<Int>?) {
        val n = front.worldSize
        val avg = op == ReduceOp.Avg
        val part = output.numel
        if (n == 1) {
            ExactSum.reduceRows(output.dtype, avg, 1, staged.segment, part, 0, part, output.segment, 0)
            return
        }
        val owned = ArrayList<Tensor>(1)
        try {
            val exchanged = if (sizes == null) {
                val rows = staged.shape[0]
                val parts = List(n) { rows / n }
                front.allToAllVInto(buffer(front, 1, staged.dtype, part * n, owned, staged.shape.drop(1), rows), staged, parts, parts)
            } else {
                front.allToAllV(staged, sizes, List(n) { sizes[front.rank] }).also { owned += it }
            }
            if (part > 0) ExactSum.reduceRows(output.dtype, avg, n, exchanged.segment, part, 0, part, output.segment, 0)
        } finally {
            owned.forEach { it.close() }
            endStaging(front)
        }
    }

    // ------------------------------------------------------------------ device tensors

    /**
     * The path of tensors the host cannot read (the GPU engine's): each rank copies its input to the
     * host ([CommunicatorBackend.hostCopy], on the backend's stream), the inputs are all-gathered through
     * the backend's object transport (staged device buffers on the GPU engine), every rank sums what
     * it needs exactly, and copies its result back. n times the tensor received per rank (not the
     * 2 (n-1)/n of the host path): correctness first, on a backend whose own reductions are the fast path.
     */
    private suspend fun deviceRootedReduce(comm: Communicator, tensor: Tensor, op: ReduceOp, root: Int) {
        val front = device(comm)
        val n = front.worldSize
        val count = tensor.numel
        val avg = op == ReduceOp.Avg
        val host = Tensor.zeros(tensor.dtype, Math.toIntExact(count))
        val result = Tensor.zeros(tensor.dtype, Math.toIntExact(count))
        try {
            front.backend.hostCopy(tensor, host.segment, toHost = true)
            if (op is ReduceOp.PreMulSum) ExactSum.scaleInto(tensor.dtype, op, host.segment, result.segment, count)
            else MemorySegment.copy(host.segment, 0, result.segment, 0, host.byteSize)
            val rows = gatherRows(front, result, 0L, host.byteSize, if (root < 0) CollectiveOp.AllReduce else CollectiveOp.Reduce)
            try {
                if (root < 0 || front.rank == root) ExactSum.reduceRows(tensor.dtype, avg, n, rows.segment, count, 0, count, result.segment, 0)
                else MemorySegment.copy(host.segment, 0, result.segment, 0, host.byteSize) // a non-root's tensor is left as it was
            } finally {
                rows.close()
            }
            front.backend.hostCopy(tensor, result.segment, toHost = false)
        } finally {
            host.close()
            result.close()
        }
    }

    private suspend fun deviceReduceScatter(comm: Communicator, output: Tensor, input: Tensor, op: ReduceOp, dim: Int, sizes: List<Int>?): Tensor {
        val front = device(comm)
        val n = front.worldSize
        val es = input.dtype.byteSize.toLong()
        val host = Tensor.zeros(input.dtype, input.shape)
        val owned = arrayListOf(host)
        try {
            front.backend.hostCopy(input, host.segment, toHost = true)
            // Rank-major parts: along dim (copies for dim > 0), or sizes' rows.
            val staged = if (dim == 0) host else Tensor.concat(host.chunk(n, dim).also { owned += it }, 0).also { owned += it }
            if (op is ReduceOp.PreMulSum) ExactSum.scaleInto(input.dtype, op, staged.segment, staged.segment, staged.numel)
            val rowElems = if (sizes == null) 0L else input.numel / maxOf(1, input.shape[0])
            val from = if (sizes == null) front.rank * output.numel * es else sizes.take(front.rank).sum() * rowElems * es
            val rows = gatherRows(front, staged, from, output.numel * es, if (sizes == null) CollectiveOp.ReduceScatter else CollectiveOp.ReduceScatterV).also { owned += it }
            val out = Tensor.zeros(output.dtype, output.shape).also { owned += it }
            if (output.numel > 0) ExactSum.reduceRows(output.dtype, op == ReduceOp.Avg, n, rows.segment, output.numel, 0, output.numel, out.segment, 0)
            front.backend.hostCopy(output, out.segment, toHost = false)
        } finally {
            owned.forEach { it.close() }
        }
        return output
    }

    private fun device(comm: Communicator): CommunicatorFront = comm as? CommunicatorFront
        ?: throw IllegalArgumentException("reproducible reductions of ${comm.device} tensors need a communicator tpcomm made (${comm.backendName} is not one); copy the tensor to the host")

    /**
     * Every rank's whole [staged] all-gathered (the same size on every rank); of each, the [length]
     * bytes from byte [from] (this rank's part): rank j's at row j.
     */
    private suspend fun gatherRows(front: CommunicatorFront, staged: Tensor, from: Long, length: Long, op: CollectiveOp): Tensor {
        val all = front.backend.objectTransport.allGather(op.apiName, staged.segment.toArray(java.lang.foreign.ValueLayout.JAVA_BYTE))
        val rows = Tensor.zeros(staged.dtype, Math.toIntExact(front.worldSize * length / staged.dtype.byteSize))
        for ((j, b) in all.withIndex()) MemorySegment.copy(b, from.toInt(), rows.segment, java.lang.foreign.ValueLayout.JAVA_BYTE, j * length, length.toInt())
        return rows
    }

    /**
     * Staging buffer [index] (0 or 1) of [comm], at least [elements] of [dtype], as a tensor of that many
     * elements ([rows] x [inner] when given). Kept per communicator (grow-only, from the budgeted host
     * pool, closed when the communicator closes: [release]); safe because a front's reproducible
     * composites run one at a time (each holds the issue turn from its call to its end), and marked
     * in use until the composite's [endStaging]. One not kept (over [CACHE_LIMIT] bytes, another
     * [Communicator]'s, or a closed communicator's) is new and added to [owned] for the caller to close.
     */
    private fun buffer(comm: Communicator, index: Int, dtype: DType, elements: Long, owned: MutableList<Tensor>, inner: List<Int> = emptyList(), rows: Int = -1): Tensor {
        val bytes = elements * dtype.byteSize
        val shape = if (rows < 0) intArrayOf(Math.toIntExact(elements)) else (listOf(rows) + inner).toIntArray()
        // Not kept: past the limit, or a third party's communicator (its calls may run concurrently).
        if (bytes > CACHE_LIMIT || comm !is CommunicatorFront) return Tensor.zeros(dtype, *shape).also { owned += it }
        val st = synchronized(buffers) { buffers.getOrPut(comm) { Staging() } }
        synchronized(st) {
            if (st.released) return Tensor.zeros(dtype, *shape).also { owned += it }
            var b = st.slots[index]
            if (b == null || b.byteSize < bytes) {
                b?.close()
                b = Tensor.zeros(DType.UInt8, Math.toIntExact(maxOf(bytes, 64)))
                st.slots[index] = b
            }
            st.busy = true
            return Tensor.wrap(b.segment.asSlice(0, bytes), dtype, *shape)
        }
    }

    /** A composite of [comm] is done with its staging buffers: closed now if the communicator closed meanwhile. */
    private fun endStaging(comm: Communicator) {
        val st = synchronized(buffers) { buffers[comm] } ?: return
        synchronized(st) {
            st.busy = false
            if (st.released) st.free()
        }
    }

    /**
     * Closes [comm]'s staging buffers (its `close`): at once, or at the end of the composite using
     * them; later composites of a closed communicator (refused anyway) keep none.
     */
    fun release(comm: Communicator) {
        val st = synchronized(buffers) { buffers[comm] } ?: return
        synchronized(st) {
            st.released = true
            if (!st.busy) st.free()
        }
    }

    /** A communicator's two kept staging buffers and whether a composite is using them; guarded by itself. */
    private class Staging {
        val slots = arrayOfNulls<Tensor>(2)
        var busy = false
        var released = false

        fun free() {
            for (i in slots.indices) { slots[i]?.close(); slots[i] = null }
        }
    }

    /** Largest staging buffer kept per communicator. */
    private const val CACHE_LIMIT: Long = 256L shl 20

    private val buffers = java.util.WeakHashMap<Communicator, Staging>()

    /** A new tensor of [tensor]'s dtype and shape holding each element times [op]'s factor, rounded once. */
    private fun scaled(tensor: Tensor, op: ReduceOp.PreMulSum): Tensor {
        val t = Tensor.zeros(tensor.dtype, tensor.shape)
        ExactSum.scaleInto(tensor.dtype, op, tensor.segment, t.segment, tensor.numel)
        return t
    }
}

/**
 * Whether the front reduces [op] on [dtype] the reproducible way: [mode] when the call says
 * ([dev.tpcomm.coroutines.reproducible]'s view), else the caller's [Reproducible] context, else the
 * communicator's setting.
 */
internal suspend inline fun ReproducibleReductions.selected(front: CommunicatorFront, dtype: dev.tpcomm.DType, op: ReduceOp, mode: Boolean?): Boolean {
    if (!applies(dtype, op)) return false
    if (mode != null) return mode
    val context = kotlinx.coroutines.currentCoroutineContext()[Reproducible]
    return context?.enabled ?: front.backend.reproducibleReductions
}
