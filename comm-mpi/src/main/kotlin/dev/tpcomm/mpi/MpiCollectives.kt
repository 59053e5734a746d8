package dev.tpcomm.mpi

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.engine.CommunicatorFront
import dev.tpcomm.engine.ExactReduction
import dev.tpcomm.engine.ExactSum
import dev.tpcomm.engine.OperationCall
import dev.tpcomm.spi.CollectiveOp
import kotlinx.coroutines.Job
import java.lang.foreign.ValueLayout

/**
 * The MPI calls of each collective of one communicator, on tensors MPI takes as they are (host
 * memory, or device pointers for a CUDA-aware MPI; [MpiDeviceStaging] runs these on host
 * temporaries for the others): the counts and datatypes, the host work around the call (layouts
 * along a dim, [ReduceOp.PreMulSum]'s scaling, reductions MPI cannot do, [MpiWorkarounds]), and
 * the blocking and non-blocking MPI call, issued by [threading] after the consistency [check].
 * Arguments were checked by the front's validator.
 */
internal class MpiCollectives(
    private val threading: MpiThreading,
    private val binding: MpiBinding,
    private val handle: Long,
    private val rank: Int,
    private val worldSize: Int,
    private val workarounds: MpiWorkarounds,
    private val hostWork: MpiHostWork,
) {
    private val abi: MpiAbi = binding.abi
    private val check: MpiConsistencyCheck = threading.check
    private val calls: MpiNativeCalls = check.calls
    private val failures: MpiFailures = calls.failures

    /** [allReduce] of a validated [tensor] MPI takes as it is (host memory or a CUDA-aware device pointer). */
    suspend fun runAllReduce(call: OperationCall, tensor: Tensor, op: ReduceOp): Tensor {
        val name = call.name
        if (workarounds.hostReduced(tensor.dtype, op)) {
            hostWork.guard(CollectiveOp.AllReduce, op, 0, tensor)
            // The tensor is allReduce's output: PreMulSum scales it in place.
            val pre = preMul(op, tensor, inPlace = true)
            val n = mpiCount(tensor)
            val staging = Tensor.zeros(tensor.dtype, listOf(blocksCount(n, name, "the host reduction's staging buffer")))
            val src = addr(tensor); val dst = addr(staging); val t = abi.datatype(tensor.dtype)
            threading.collective(call, check.sig(call), arrayOf(tensor, staging),
                { pre?.apply(); binding.allgather(src, n, t, dst, n, t, handle) },
                { r -> pre?.apply(); binding.iallgather(src, n, t, dst, n, t, handle, r) })
            HostReduction.reduceBlocks(staging.segment, worldSize, n.toLong(), tensor.dtype, op, tensor.segment)
            return tensor
        }
        if (threading.fastPath()) {
            allReduceBlocking(call, tensor, op)
            return tensor
        }
        reduceInPlace(tensor, op) { pre, n, t, o, payload ->
            val buf = addr(tensor); val inPlace = abi.inPlace
            threading.collective(call, check.sig(call), tensor,
                { pre?.apply(); binding.allreduce(inPlace, buf, n, t, o, handle) },
                { r -> pre?.apply(); binding.iallreduce(inPlace, buf, n, t, o, handle, r) },
                payload = payload)
        }
        return tensor
    }

    /**
     * An in-place reduction's steps around its MPI call: the checks of what runs on the host,
     * PreMulSum's scaling (applied by [call] on the thread that calls MPI), the unsigned-byte
     * workaround's flip and flip back, and Avg's division after the sum. [call] gets the scaling,
     * the count, MPI's datatype and op.
     */
    private inline fun reduceInPlace(
        tensor: Tensor, op: ReduceOp, call: (pre: PreMul?, n: Int, type: Long, mpiOp: Long, payload: MpiSlotPayload?) -> Unit,
    ) {
        hostWork.guard(CollectiveOp.AllReduce, op, 0, tensor)
        // The tensor is allReduce's output: PreMulSum scales it in place.
        val pre = preMul(op, tensor, inPlace = true)
        val n = mpiCount(tensor)
        val flip = workarounds.flipsUnsignedBytes(tensor, op)
        val mpiOp = abi.op(op, tensor.dtype)
        // Small enough to ride in the consistency check's exchange, reduced on the host as MPI would
        // be asked to (Avg as Sum, divided below); not with PreMulSum's per-rank scaling or the
        // flipped bytes, which only MPI's own reduction reads right.
        val payload = if (check.slotsCarry && pre == null && !flip && MpiSlotPayload.fits(tensor.byteSize)) {
            MpiSlotPayload.AllReduce(tensor, if (op == ReduceOp.Avg) ReduceOp.Sum else op)
        } else {
            null
        }
        if (flip) workarounds.flipTopBits(tensor)
        try {
            call(pre, n, workarounds.reduceType(tensor, op), mpiOp, payload)
        } finally {
            if (flip) workarounds.flipTopBits(tensor)
        }
        if (op == ReduceOp.Avg) HostReduction.divide(tensor.segment, tensor.dtype, tensor.numel, worldSize)
    }

    /** allReduce as one blocking MPI call on whichever thread owns MPI now (see [issue]). */
    fun allReduceBlocking(call: OperationCall, tensor: Tensor, op: ReduceOp) {
        reduceInPlace(tensor, op) { pre, n, t, o, payload ->
            val buf = addr(tensor); val inPlace = abi.inPlace
            threading.inlineBlocking(call.entry, call.name, tensor, check.sig(call), payload = payload) { pre?.apply(); binding.allreduce(inPlace, buf, n, t, o, handle) }
        }
    }

    /** broadcast as one blocking MPI call on whichever thread owns MPI now (see [issue]). */
    fun broadcastBlocking(call: OperationCall, tensor: Tensor, root: Int) {
        val n = mpiCount(tensor)
        val buf = addr(tensor); val t = abi.datatype(tensor.dtype)
        threading.inlineBlocking(call.entry, call.name, tensor, check.sig(call), payload = broadcastPayload(tensor, root)) { binding.bcast(buf, n, t, root, handle) }
    }

    /** [broadcast] of a validated [tensor] MPI takes as it is. */
    suspend fun runBroadcast(call: OperationCall, tensor: Tensor, root: Int): Tensor {
        val name = call.name
        if (threading.fastPath()) {
            broadcastBlocking(call, tensor, root)
            return tensor
        }
        val n = mpiCount(tensor)
        val buf = addr(tensor); val t = abi.datatype(tensor.dtype)
        threading.collective(call, check.sig(call), tensor,
            { binding.bcast(buf, n, t, root, handle) },
            { r -> binding.ibcast(buf, n, t, root, handle, r) },
            payload = broadcastPayload(tensor, root))
        return tensor
    }

    /** A broadcast small enough to ride in the consistency check's exchange ([MpiSlotPayload.Broadcast]), or null. */
    private fun broadcastPayload(tensor: Tensor, root: Int): MpiSlotPayload? =
        if (check.slotsCarry && MpiSlotPayload.fits(tensor.byteSize)) MpiSlotPayload.Broadcast(tensor, root, rank) else null

    /**
     * The reproducible all-reduce ([root] -1) or reduce of a small host [tensor] ([ExactReduction],
     * [MpiBackend.reducesExactly]): every rank's input gathered (`MPI_Allgather`, or `MPI_Gather`
     * to the root), then each element summed (or averaged) exactly on the host by [ExactSum], on
     * every rank (on the root only for reduce; the others' tensors stay as they were). The front's
     * composite gathers and sums the same way: the same bits, in one operation.
     */
    suspend fun runExactReduction(call: OperationCall, tensor: Tensor, op: ReduceOp, root: Int): Tensor {
        if (threading.fastPath()) {
            exactReductionBlocking(call, tensor, op, root)
            return tensor
        }
        exactReduction(tensor, op, root) { src, n, t, dst, keepAlive, payload ->
            threading.collective(call, check.sig(call), keepAlive,
                { gatherBlocking(root, src, n, t, dst) },
                { r -> if (root < 0) binding.iallgather(src, n, t, dst, n, t, handle, r) else binding.igather(src, n, t, dst, n, t, root, handle, r) },
                payload = payload)
        }
        return tensor
    }

    /** [runExactReduction] as one blocking MPI call on whichever thread owns MPI now (see [MpiBackend.issue]). */
    fun exactReductionBlocking(call: OperationCall, tensor: Tensor, op: ReduceOp, root: Int) {
        exactReduction(tensor, op, root) { src, n, t, dst, keepAlive, payload ->
            threading.inlineBlocking(call.entry, call.name, keepAlive, check.sig(call), payload = payload) { gatherBlocking(root, src, n, t, dst) }
        }
    }

    /** The blocking gather of [runExactReduction]: `MPI_Allgather` ([root] -1) or `MPI_Gather` to [root]. */
    private fun gatherBlocking(root: Int, src: Long, n: Int, t: Long, dst: Long): Int =
        if (root < 0) binding.allgather(src, n, t, dst, n, t, handle) else binding.gather(src, n, t, dst, n, t, root, handle)

    /**
     * [runExactReduction]'s steps around its gather: the staging rows (where they are received:
     * every rank for all-reduce, the root for reduce), [gather] (given the send and receive
     * addresses, the count, MPI's datatype, what the call keeps alive, and, for a tensor that fits,
     * the consistency check's slots to carry the inputs in: [MpiSlotPayload.Exact], which then sums
     * them itself and the gather does not run), the exact sums of the gathered rows, and the
     * staging's release (freed once no MPI call still holds it).
     */
    private inline fun exactReduction(
        tensor: Tensor, op: ReduceOp, root: Int, gather: (src: Long, n: Int, type: Long, dst: Long, keepAlive: Any, payload: MpiSlotPayload.Exact?) -> Unit,
    ) {
        val n = mpiCount(tensor)
        val average = op == ReduceOp.Avg
        val payload = if (check.slotsCarry && MpiSlotPayload.fits(tensor.byteSize)) MpiSlotPayload.Exact(tensor, average, root, rank) else null
        val receives = root < 0 || rank == root
        val rows = if (receives) Tensor.zeros(tensor.dtype, listOf(blocksCount(n, "reproducible ${if (root < 0) "allReduce" else "reduce"}", "the gathered inputs"))) else null
        try {
            gather(addr(tensor), n, abi.datatype(tensor.dtype), rows?.let { addr(it) } ?: 0L, if (rows == null) tensor else arrayOf(tensor, rows), payload)
            if (rows != null && payload?.finished != true) ExactSum.reduceRows(tensor.dtype, average, worldSize, rows.segment, n.toLong(), 0, n.toLong(), tensor.segment, 0)
        } finally {
            rows?.close()
        }
    }

    /** [reduce] of a validated [tensor] MPI takes as it is. */
    suspend fun runReduce(call: OperationCall, tensor: Tensor, root: Int, op: ReduceOp): Tensor {
        val name = call.name
        hostWork.guard(CollectiveOp.Reduce, op, 0, tensor)
        val n = mpiCount(tensor)
        val t = abi.datatype(tensor.dtype)
        val sig = check.sig(call)
        // The root's tensor is the output (scaled in place); the other ranks' must stay unchanged.
        val pre = preMul(op, tensor, inPlace = rank == root)
        if (workarounds.hostReduced(tensor.dtype, op)) {
            val stagingCount = blocksCount(n, name, "the host reduction's staging buffer")
            val staging = if (rank == root) Tensor.zeros(tensor.dtype, listOf(stagingCount)) else null
            val entry = call.entry
            val src = addr(pre?.target ?: tensor); val dst = staging?.let { addr(it) } ?: 0L
            threading.collective(call, sig, arrayOf(tensor, staging, pre?.target),
                { pre?.apply(); binding.gather(src, n, t, dst, n, t, root, handle) },
                { r -> pre?.apply(); binding.igather(src, n, t, dst, n, t, root, handle, r) })
            pre?.release()
            if (staging != null) HostReduction.reduceBlocks(staging.segment, worldSize, n.toLong(), tensor.dtype, op, tensor.segment)
            return tensor
        }
        val entry = call.entry
        val buf = addr(tensor); val o = abi.op(op, tensor.dtype)
        val send = if (rank == root) abi.inPlace else addr(pre?.target ?: tensor)
        val recv = if (rank == root) buf else 0L
        val flip = workarounds.flipsUnsignedBytes(tensor, op)
        val rt = workarounds.reduceType(tensor, op)
        if (flip) workarounds.flipTopBits(tensor)
        try {
            threading.collective(call, sig, if (pre == null) tensor else arrayOf(tensor, pre.target),
                { pre?.apply(); binding.reduce(send, recv, n, rt, o, root, handle) },
                { r -> pre?.apply(); binding.ireduce(send, recv, n, rt, o, root, handle, r) })
        } finally {
            if (flip) workarounds.flipTopBits(tensor)
        }
        pre?.release()
        if (op == ReduceOp.Avg && rank == root) HostReduction.divide(tensor.segment, tensor.dtype, tensor.numel, worldSize)
        return tensor
    }

    /** [allGatherInto] of validated tensors MPI takes as they are, along the normalised dim [d]. */
    suspend fun runAllGather(call: OperationCall, output: Tensor, input: Tensor, d: Int): Tensor {
        val name = call.name
        val n = mpiCount(input)
        val direct = contiguousAlong(input, d)
        hostWork.guard(CollectiveOp.AllGather, null, d, input)
        hostWork.guard(CollectiveOp.AllGather, null, d, output, layout = input)
        val staging = if (direct) output else Tensor.zeros(input.dtype, listOf(blocksCount(n, name, "the staging buffer")))
        val entry = call.entry
        val t = abi.datatype(input.dtype)
        val dst = addr(staging)
        // An input inside the output (PyTorch's in-place all_gather_into_tensor), on the host or on
        // one device, was refused by the validator: MPI forbids aliased buffers and MPICH checks it
        // (MPIR_ERRTEST_ALIAS_COLL, "Buffers must not be aliased"), which failed the call and
        // aborted the communicator.
        val src = addr(input)
        threading.collective(call, check.sig(call), arrayOf(input, output, staging),
            { binding.allgather(src, n, t, dst, n, t, handle) },
            { r -> binding.iallgather(src, n, t, dst, n, t, handle, r) })
        if (!direct) scatterBlocksAlong(staging, input.shape, output, d)
        return output
    }

    /** [reduceScatterInto] of validated tensors MPI takes as they are, along the normalised dim [d]. */
    suspend fun runReduceScatter(call: OperationCall, output: Tensor, input: Tensor, op: ReduceOp, d: Int): Tensor {
        val name = call.name
        val n = mpiCount(output)
        val direct = contiguousAlong(input, d)
        val half = workarounds.hostReduced(input.dtype, op)
        hostWork.guard(CollectiveOp.ReduceScatter, op, d, input)
        hostWork.guard(CollectiveOp.ReduceScatter, op, d, output, layout = input)
        val gathered = if (direct) input else gatherBlocksAlong(input, d)
        // The input is not the output: PreMulSum scales into a staging buffer (or the rearranged copy, ours).
        val pre = preMul(op, gathered, inPlace = gathered !== input)
        val send = pre?.target ?: gathered
        val t = abi.datatype(input.dtype)
        val sig = check.sig(call)
        val entry = call.entry
        if (half) {
            val blocks = Tensor.zeros(input.dtype, listOf(blocksCount(n, name, "the host reduction's staging buffer")))
            val src = addr(send); val dst = addr(blocks)
            threading.collective(call, sig, arrayOf(input, send, blocks),
                { pre?.apply(); binding.alltoall(src, n, t, dst, n, t, handle) },
                { r -> pre?.apply(); binding.ialltoall(src, n, t, dst, n, t, handle, r) })
            pre?.release()
            HostReduction.reduceBlocks(blocks.segment, worldSize, n.toLong(), input.dtype, op, output.segment)
            return output
        }
        val src = addr(send); val dst = addr(output); val o = abi.op(op, input.dtype)
        val flip = workarounds.flipsUnsignedBytes(input, op)
        val rt = workarounds.reduceType(input, op)
        if (flip) workarounds.flipTopBits(send)
        try {
            threading.collective(call, sig, arrayOf(input, send, output),
                { pre?.apply(); binding.reduceScatterBlock(src, dst, n, rt, o, handle) },
                { r -> pre?.apply(); binding.ireduceScatterBlock(src, dst, n, rt, o, handle, r) })
            pre?.release()
        } finally {
            if (flip) {
                if (send === input) workarounds.flipTopBits(input)
                workarounds.flipTopBits(output)
            }
        }
        if (op == ReduceOp.Avg) HostReduction.divide(output.segment, output.dtype, output.numel, worldSize)
        return output
    }

    /** [gather] of a validated [input] MPI takes as it is, along the normalised dim [d], into the root's [output] (null elsewhere). */
    suspend fun runGather(call: OperationCall, input: Tensor, root: Int, d: Int, output: Tensor?): Tensor? {
        val name = call.name
        val n = mpiCount(input)
        val direct = contiguousAlong(input, d)
        hostWork.guard(CollectiveOp.Gather, null, d, input)
        val stagingCount = blocksCount(n, name, "the staging buffer")
        val staging = if (rank != root) null else if (direct) output else Tensor.zeros(input.dtype, listOf(stagingCount))
        val entry = call.entry
        val src = addr(input); val dst = staging?.let { addr(it) } ?: 0L; val t = abi.datatype(input.dtype)
        threading.collective(call, check.sig(call), arrayOf(input, output, staging),
            { binding.gather(src, n, t, dst, n, t, root, handle) },
            { r -> binding.igather(src, n, t, dst, n, t, root, handle, r) })
        if (output != null && !direct) scatterBlocksAlong(staging!!, input.shape, output, d)
        return output
    }

    /**
     * [scatter] of validated tensors MPI takes as they are, along the normalised dim [d]: [input]
     * is the root's (null on the other ranks).
     */
    suspend fun runScatter(call: OperationCall, output: Tensor, input: Tensor?, root: Int, d: Int) {
        val name = call.name
        val n = mpiCount(output)
        val direct = contiguousAlong(output, d)
        if (input != null) hostWork.guard(CollectiveOp.Scatter, null, d, input, layout = output)
        hostWork.guard(CollectiveOp.Scatter, null, d, output)
        val send = if (input == null) null else if (direct) input else gatherBlocksAlong(input, d)
        val entry = call.entry
        val src = send?.let { addr(it) } ?: 0L; val dst = addr(output); val t = abi.datatype(output.dtype)
        threading.collective(call, check.sig(call), arrayOf(input, send, output),
            { binding.scatter(src, n, t, dst, n, t, root, handle) },
            { r -> binding.iscatter(src, n, t, dst, n, t, root, handle, r) })
    }

    /** [allToAll] of a validated [input] MPI takes as it is, along the normalised dim [d], into [output] (of [input]'s shape). */
    suspend fun runAllToAll(call: OperationCall, input: Tensor, d: Int, output: Tensor): Tensor {
        val name = call.name
        val total = mpiCount(input)
        val n = total / worldSize
        val direct = contiguousAlong(input, d)
        hostWork.guard(CollectiveOp.AllToAll, null, d, input)
        val send = if (direct) input else gatherBlocksAlong(input, d)
        val recv = if (direct) output else Tensor.zeros(input.dtype, listOf(total))
        val entry = call.entry
        val src = addr(send); val dst = addr(recv); val t = abi.datatype(input.dtype)
        threading.collective(call, check.sig(call), arrayOf(input, send, recv, output),
            { binding.alltoall(src, n, t, dst, n, t, handle) },
            { r -> binding.ialltoall(src, n, t, dst, n, t, handle, r) })
        if (!direct) {
            val chunkShape = input.shape.toMutableList().also { it[d] = it[d] / worldSize }
            scatterBlocksAlong(recv, chunkShape, output, d)
        }
        return output
    }

    // ------------------------------------------------------------------ uneven collectives
    //
    // Sizes count rows along dim 0 (Communicator.allGatherV); MPI gets element counts and
    // displacements as int arrays. The validator refuses a result above maxCount = Int.MAX_VALUE
    // elements ("64-bit counts"): every count and displacement (at most the output's or input's
    // element count) then fits MPI's int. Host tensors only (no device staging for these three).

    /** `int[]` arrays for MPI in one native tensor, kept alive with the call: [values] in order. */
    private fun intArrays(vararg values: IntArray): Tensor {
        val all = IntArray(values.sumOf { it.size })
        var at = 0
        for (v in values) { v.copyInto(all, at); at += v.size }
        return Tensor.of(all)
    }

    /** Element counts of [rows] rows of [rowElements] elements, and their prefix sums (displacements); within int by the validator. */
    private fun elementCounts(rows: List<Int>, rowElements: Long): Pair<IntArray, IntArray> {
        val counts = IntArray(worldSize) { Math.toIntExact(rows[it] * rowElements) }
        val displs = IntArray(worldSize)
        var at = 0L
        for (i in 0 until worldSize) { displs[i] = Math.toIntExact(at); at += counts[i] }
        return counts to displs
    }

    suspend fun runAllGatherV(call: OperationCall, output: Tensor, input: Tensor, sizes: List<Int>): Tensor {
        val name = call.name
        val (counts, displs) = elementCounts(sizes, input.stride(0))
        val meta = intArrays(counts, displs)
        val n = mpiCount(input)
        val t = abi.datatype(input.dtype)
        val src = addr(input); val dst = addr(output)
        val cAddr = addr(meta); val dAddr = cAddr + 4L * worldSize
        val sig = check.sig(call)
        val entry = call.entry
        threading.collective(call, sig, arrayOf(input, output, meta),
            { binding.allgatherv(src, n, t, dst, cAddr, dAddr, t, handle) },
            { r -> binding.iallgatherv(src, n, t, dst, cAddr, dAddr, t, handle, r) })
        return output
    }

    suspend fun runReduceScatterV(call: OperationCall, output: Tensor, input: Tensor, sizes: List<Int>, op: ReduceOp): Tensor {
        val name = call.name
        val rowElements = input.stride(0)
        val (counts, displs) = elementCounts(sizes, rowElements)
        val n = mpiCount(output)
        val t = abi.datatype(input.dtype)
        val sig = check.sig(call)
        // The input is not the output: PreMulSum scales into a staging buffer.
        val pre = preMul(op, input, inPlace = false)
        val entry = call.entry
        if (workarounds.hostReduced(input.dtype, op)) {
            // As reduceScatter does for dtypes MPI cannot reduce: every rank's block for this rank
            // (n elements from each) arrives by MPI_Alltoallv, then the host reduces the blocks.
            val blocks = Tensor.zeros(input.dtype, listOf(blocksCount(n, name, "the host reduction's staging buffer")))
            val recvCounts = IntArray(worldSize) { n }
            val recvDispls = IntArray(worldSize) { it * n }
            val meta = intArrays(counts, displs, recvCounts, recvDispls)
            val m = addr(meta); val w4 = 4L * worldSize
            val src = addr(pre?.target ?: input); val dst = addr(blocks)
            threading.collective(call, sig, arrayOf(input, blocks, meta, pre?.target),
                { pre?.apply(); binding.alltoallv(src, m, m + w4, t, dst, m + 2 * w4, m + 3 * w4, t, handle) },
                { r -> pre?.apply(); binding.ialltoallv(src, m, m + w4, t, dst, m + 2 * w4, m + 3 * w4, t, handle, r) })
            pre?.release()
            HostReduction.reduceBlocks(blocks.segment, worldSize, n.toLong(), input.dtype, op, output.segment)
            return output
        }
        val meta = intArrays(counts)
        val cAddr = addr(meta)
        val src = addr(pre?.target ?: input); val dst = addr(output); val o = abi.op(op, input.dtype)
        val flip = workarounds.flipsUnsignedBytes(input, op)
        val rt = workarounds.reduceType(input, op)
        if (flip) workarounds.flipTopBits(input)
        try {
            threading.collective(call, sig, arrayOf(input, output, meta, pre?.target),
                { pre?.apply(); binding.reduceScatter(src, dst, cAddr, rt, o, handle) },
                { r -> pre?.apply(); binding.ireduceScatter(src, dst, cAddr, rt, o, handle, r) })
            pre?.release()
        } finally {
            if (flip) {
                workarounds.flipTopBits(input)
                workarounds.flipTopBits(output)
            }
        }
        if (op == ReduceOp.Avg) HostReduction.divide(output.segment, output.dtype, output.numel, worldSize)
        return output
    }

    suspend fun runAllToAllV(call: OperationCall, output: Tensor, input: Tensor, inputSplits: List<Int>, outputSplits: List<Int>): Tensor {
        val name = call.name
        val rowElements = input.stride(0)
        val (sendCounts, sendDispls) = elementCounts(inputSplits, rowElements)
        val (recvCounts, recvDispls) = elementCounts(outputSplits, rowElements)
        // The last two arrays hold the split check's exchange: this rank's inputSplits out, and what
        // each peer sends this rank in (one MPI_Alltoall of ints, only with the consistency check).
        val meta = intArrays(sendCounts, sendDispls, recvCounts, recvDispls, inputSplits.toIntArray(), IntArray(worldSize))
        val m = addr(meta); val w4 = 4L * worldSize
        val t = abi.datatype(input.dtype)
        val src = addr(input); val dst = addr(output)
        val sig = check.sig(call)
        val entry = call.entry
        val splitsCheck = if (sig == null) null else SplitsExchange(meta, 4 * worldSize, outputSplits, name, entry)
        threading.collective(call, sig, arrayOf(input, output, meta),
            { binding.alltoallv(src, m, m + w4, t, dst, m + 2 * w4, m + 3 * w4, t, handle) },
            { r -> binding.ialltoallv(src, m, m + w4, t, dst, m + 2 * w4, m + 3 * w4, t, handle, r) },
            splitsCheck)
        return output
    }

    /**
     * allToAllV's split check: one `MPI_Alltoall` of one int per pair tells each rank how many rows
     * every peer sends it; [CollectiveSignature.splitsWord][dev.tpcomm.spi.CollectiveSignature.splitsWord]
     * turns a disagreement with its outputSplits into the signature's extra word, so the digest
     * exchange that follows fails every rank with a [CollectiveMismatchException] naming the ranks
     * that expected other sizes, before any row moves. [meta]'s ints from [at] hold this rank's
     * inputSplits, then the received counts.
     */
    private inner class SplitsExchange(
        private val meta: Tensor, private val at: Int, private val outputSplits: List<Int>,
        private val operation: String, private val entry: FlightRecorder.Entry,
    ) : MpiConsistencyCheck.PreSignature {
        private val sendAddr = addr(meta) + 4L * at
        private val recvAddr = sendAddr + 4L * worldSize

        private fun finish(sig: LongArray) {
            val sentToMe = IntArray(worldSize) { meta.segment.getAtIndex(ValueLayout.JAVA_INT, (at + worldSize + it).toLong()) }
            CommunicatorFront.setSplitsWord(sig, 0, sentToMe, outputSplits)
        }

        override fun blocking(sig: LongArray) {
            val i32 = abi.datatype(dev.tpcomm.DType.Int32)
            calls.runBlockingCall("$operation(splits)", entry, meta) { binding.alltoall(sendAddr, 1, i32, recvAddr, 1, i32, handle) }
            finish(sig)
        }

        override fun polling(sig: LongArray, callerJob: Job?, watchNotices: Boolean) {
            val i32 = abi.datatype(dev.tpcomm.DType.Int32)
            failures.check(binding.ialltoall(sendAddr, 1, i32, recvAddr, 1, i32, handle, calls.scratchAddress + MpiNativeCalls.OFF_REQUEST), operation, entry)
            check.poll(operation, entry, callerJob, watchNotices)
            finish(sig)
        }
    }

    suspend fun runBarrier(call: OperationCall) {
        // With the consistency check the exchange itself is the barrier (MpiSlotPayload.Barrier).
        threading.collective(call, check.sig(call), null,
            { binding.barrier(handle) },
            { r -> binding.ibarrier(handle, r) },
            payload = if (check.slotsCarry) MpiSlotPayload.Barrier else null)
    }

    // ------------------------------------------------------------------ helpers

    /** The element count of a buffer of [worldSize] blocks of [n] elements, refused beyond what one tensor dimension (and MPI's int count) holds. */
    private fun blocksCount(n: Int, operation: String, what: String): Int {
        val total = n.toLong() * worldSize
        require(total <= Int.MAX_VALUE) {
            "$operation: $what would have $worldSize x $n = $total elements, more than MPI's int count and a tensor dimension allow " +
                "(${Int.MAX_VALUE}); split the tensor into smaller ones"
        }
        return total.toInt()
    }

    /**
     * [ReduceOp.PreMulSum]'s local step (MPI has no scaled sum; [MpiAbi.op] maps it to `MPI_SUM`):
     * [apply] writes [source] times this rank's factor, each product rounded to the dtype
     * ([HostReduction.scale]), into [target], which MPI then sends. The operations call [apply]
     * inside their MPI lambda, after the signature check, so a mismatch or a bad argument leaves
     * every buffer as it was.
     */
    private class PreMul(val source: Tensor, val target: Tensor, val factor: Double) {
        fun apply() = HostReduction.scale(source.segment, target.segment, source.dtype, source.numel, factor)

        /** Returns a staging [target] to the pool once the operation succeeded (after a failure MPI may still touch it: the GC frees it). */
        fun release() {
            if (target !== source) target.close()
        }
    }

    /**
     * Null unless [op] is [ReduceOp.PreMulSum]. [inPlace]: [input] is the caller's output (allReduce's
     * tensor, the reduce root's, a rearranged copy of ours) and is scaled where it is; otherwise the
     * products go to a pooled staging buffer, so an input the caller did not give as output is never
     * written.
     */
    private fun preMul(op: ReduceOp, input: Tensor, inPlace: Boolean): PreMul? {
        if (op !is ReduceOp.PreMulSum) return null
        val target = if (inPlace) input else Tensor.zeros(input.dtype, listOf(mpiCount(input)))
        return PreMul(input, target, op.factorIn(input.dtype))
    }



    private fun contiguousAlong(t: Tensor, d: Int): Boolean = MpiHostWork.contiguousAlong(t, d)

    /** Rearranges [input]'s `worldSize` chunks along [d] into one dim-0 staging buffer (chunk r contiguous). */
    private fun gatherBlocksAlong(input: Tensor, d: Int): Tensor {
        val chunks = input.chunk(worldSize, d)
        val flat = chunks.map { it.view(it.numel.toInt()) }
        return Tensor.concat(flat, 0)
    }

    /** Writes the `worldSize` blocks of [staging] (each of [blockShape]) into [output] joined along [d]. */
    private fun scatterBlocksAlong(staging: Tensor, blockShape: List<Int>, output: Tensor, d: Int) {
        val blocks = staging.chunk(worldSize, 0).map { it.view(*blockShape.toIntArray()) }
        Tensor.concatInto(blocks, output, d)
    }
}

/** The address MPI is given for [t]: a device pointer, or the host segment's address. */
internal fun addr(t: Tensor): Long = if (t.device.isGpu) t.address else t.segment.address()

/** [t]'s element count as MPI's `int` count: the validator's `maxCount` (`Int.MAX_VALUE`) refused larger tensors. */
internal fun mpiCount(t: Tensor): Int = Math.toIntExact(t.numel)
