package dev.tpcomm.spi

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.PointToPoint
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor

/**
 * The one argument check of every collective, run first by every backend before any data moves,
 * so that the same mistake gives the same [IllegalArgumentException] (same message, word for word)
 * on every backend and leaves buffers and communicator untouched.
 *
 * Each function checks one operation's arguments and returns the normalised dimension (0 until
 * `ndim`) where the operation has one. Sizes are computed in `Long` arithmetic and refused when a
 * result would not fit where it must go (a dimension is an `Int`; a native count may be limited by
 * [maxCount]), never wrapped.
 *
 * Tensors are refused when closed (a view whose parent was closed is closed), on another device
 * than [device] (unless [anyDevice]), of a dtype the backend's library lacks ([dtypeRefusal]),
 * read-only where the call writes them, over host memory that was freed (an `Arena` closed under a
 * `Tensor.wrap`), and, when [nativeMemory] is set (the backend hands host addresses to native
 * code), backed by a Java heap array, whose address native code cannot use. Tags above [maxTag]
 * (MPI's `MPI_TAG_UB`) are refused. What the backend's library cannot reduce ([reductionRefusal])
 * or send ([pointToPointLimits]) is refused here too, never by the backend after the call was
 * recorded: a refused call leaves nothing in the flight recorder and takes no sequence number, on
 * every backend.
 *
 * Immutable and thread-safe.
 */
@InternalTpcommApi
public class CollectiveValidator(
    /** Number of ranks of the communicator. */
    public val worldSize: Int,
    /** The device whose tensors the communicator moves. */
    public val device: Device,
    /**
     * True when host tensors must be addressable by native code: MPI and staging hand their
     * addresses to native libraries, and the in-process backend sets it too by default so that it
     * refuses what they refuse (its option `local.allowHeapMemory=true` clears it). One message for
     * every backend that sets it.
     */
    public val nativeMemory: Boolean,
    /** The largest tag the library accepts (`Int.MAX_VALUE` when unlimited). */
    public val maxTag: Int = Int.MAX_VALUE,
    /** The most elements one call may move (`Int.MAX_VALUE` where the library counts in `int`). */
    public val maxCount: Long = Long.MAX_VALUE,
    /**
     * True when the communicator takes tensors on any GPU device besides those on [device] (the
     * host): the MPI backend gives a CUDA-aware library device pointers and stages other device
     * tensors through host memory. Such tensors get every check but those of host memory.
     */
    public val anyDevice: Boolean = false,
    /**
     * Why this backend's library cannot move a dtype (for example a GPU library too old for
     * bfloat16), or null when it can: the refusal's text after `"operation: "`, saying what to
     * change. Checked for every tensor; must be thread-safe and cheap. Null: every dtype is moved.
     */
    public val dtypeRefusal: ((DType) -> String?)? = null,
    /**
     * Why this backend's library cannot reduce with a [ReduceOp] on a [DType] that the core accepts
     * (NCCL: no bitwise reductions, no int16 type, FP8 only in its OCP formats from 2.24, Avg from
     * 2.10), or null when it can: the refusal's text after `"operation: "`, saying what to change.
     * Called after the core's own check of the op and dtype ([CollectiveChecks.op]) wherever an
     * operation reduces (allReduce, reduce, reduceScatter and reduceScatterV with their `Into`
     * forms), before anything is recorded; must be thread-safe and cheap. Null: every op the core
     * accepts is reduced.
     */
    public val reductionRefusal: ((ReduceOp, DType) -> String?)? = null,
    /**
     * What the backend's library cannot do with messages (tags, [Communicator.ANY_SOURCE], messages
     * to oneself), refused by [send], [recv], every element of [sendRecv], [sendObject] and
     * [recvObject] (after their other checks) with the texts [PointToPointLimits] states. Null: no limits.
     */
    public val pointToPointLimits: PointToPointLimits? = null,
    /**
     * Why this backend runs the uneven collectives (allGatherV, reduceScatterV, allToAllV and their
     * `Into` forms) on host tensors only although [anyDevice] lets its other operations take device
     * tensors (MPI: it neither stages them nor hands them to a CUDA-aware library), or null when it
     * does not: the refusal's text after `"operation: "` for a tensor on [Device] (the argument),
     * saying what to change. Checked on each of their tensors on a GPU, before anything is recorded.
     */
    public val unevenDeviceRefusal: ((Device) -> String)? = null,
    /**
     * Why this backend cannot run an operation on a device tensor it would give its library
     * directly, or null when it can: MPI with a CUDA-aware library does some of its work on the
     * host (a reduction the library cannot do, PreMulSum's scaling, Avg's division, a rearrangement
     * along a dim other than 0), which a device pointer does not allow. Called with the
     * [CollectiveOp], the tensor, the [ReduceOp] (null where none) and the normalised dim (0 where
     * none) for each tensor on a GPU of allReduce, reduce, allGather, reduceScatter (and their
     * `Into` forms), gather, scatter and allToAll, after their other checks and before anything is
     * recorded. Returns the refusal's text after `"operation: "`, saying what to change; must be
     * thread-safe and cheap.
     */
    public val deviceRefusal: ((CollectiveOp, Tensor, ReduceOp?, Int) -> String?)? = null,
) {
    /**
     * [deviceRefusal] for [t] (skipped when null or not on a GPU), as [op] with [reduceOp] along the
     * normalised dim [d]. On every call's path: no allocation, two checks when nothing is refused.
     */
    private fun onDevice(op: CollectiveOp, reduceOp: ReduceOp?, d: Int, t: Tensor?) {
        val refusal = deviceRefusal ?: return
        if (t == null || !t.device.isGpu) return
        refusal(op, t, reduceOp, d)?.let { throw IllegalArgumentException("${op.apiName}: $it") }
    }

    /** [unevenDeviceRefusal] for [tensor] of the uneven collective [operation]. */
    private fun unevenOnDevice(tensor: Tensor, operation: String) {
        val refusal = unevenDeviceRefusal ?: return
        if (tensor.device.isGpu) throw IllegalArgumentException("$operation: ${refusal(tensor.device)}")
    }

    /**
     * [tensor] as the [role] of [operation]: open, on [device] (or on any GPU device when
     * [anyDevice]), of a dtype the library moves, addressable, writable if [written], and of at
     * most [maxCount] elements.
     */
    public fun tensor(tensor: Tensor, operation: String, role: String, written: Boolean) {
        if (anyDevice && tensor.device.isGpu) CollectiveChecks.open(tensor, operation, role) else CollectiveChecks.device(tensor, device, operation, role)
        dtypeRefusal?.invoke(tensor.dtype)?.let { throw IllegalArgumentException("$operation: $it") }
        if (!tensor.device.isGpu) {
            val s = tensor.segment
            require(s.scope().isAlive) {
                "$operation: the $role's memory was freed (the Arena of the segment it wraps was closed); keep the memory alive while the tensor is used"
            }
            require(!(nativeMemory && !s.isNative)) {
                "$operation: the $role is backed by a Java heap array, whose address native code cannot use; " +
                    "allocate it off the heap (Tensor.zeros, Tensor.copy, or Tensor.wrap of a segment from an Arena)"
            }
            require(!(written && s.isReadOnly)) {
                "$operation: the $role is read-only but this call writes it; pass a writable tensor (for example tensor.copy()). " +
                    "(If it is a chunk along a dimension other than 0: such chunks are read-only copies, since Tensor has no strides, " +
                    "so writing one could not change the chunked tensor; reduce a tensor of its own and copy the result back.)"
            }
        }
        require(tensor.numel <= maxCount) {
            "$operation: the $role has ${tensor.numel} elements, more than this backend moves in one call ($maxCount); split it into chunks"
        }
    }

    /** [Communicator.allReduce]. */
    public fun allReduce(tensor: Tensor, op: ReduceOp) {
        tensor(tensor, "allReduce", "tensor", written = true)
        reduction(op, tensor.dtype, "allReduce")
        onDevice(CollectiveOp.AllReduce, op, 0, tensor)
    }

    /** [Communicator.broadcast]: [tensor] is written on every rank but the root; it is checked as written everywhere so every rank refuses alike. */
    public fun broadcast(tensor: Tensor, root: Int) {
        CollectiveChecks.root(root, worldSize, "broadcast")
        tensor(tensor, "broadcast", "tensor", written = true)
    }

    /** [Communicator.reduce]. */
    public fun reduce(tensor: Tensor, root: Int, op: ReduceOp) {
        CollectiveChecks.root(root, worldSize, "reduce")
        tensor(tensor, "reduce", "tensor", written = true)
        reduction(op, tensor.dtype, "reduce")
        onDevice(CollectiveOp.Reduce, op, 0, tensor)
    }

    /** The shape [Communicator.allGather] returns, after checking [input] and [dim]. Returns the shape. */
    public fun allGatherShape(input: Tensor, dim: Int): List<Int> = gatheringShape(input, dim, CollectiveOp.AllGather)

    /** [input] and [dim] of the gathering operation [op] (allGather or gather); returns [input]'s shape with [dim] times the world size. */
    private fun gatheringShape(input: Tensor, dim: Int, op: CollectiveOp): List<Int> {
        val operation = op.apiName
        tensor(input, operation, "input", written = false)
        val d = dim(input, dim, operation)
        val shape = gatheredShape(input, d, operation)
        onDevice(op, null, d, input)
        return shape
    }

    /** [Communicator.allGatherInto]. Returns the normalised dim. */
    public fun allGatherInto(output: Tensor, input: Tensor, dim: Int): Int {
        val op = "allGather"
        tensor(input, op, "input", written = false)
        tensor(output, op, "output", written = true)
        val d = dim(input, dim, op)
        CollectiveChecks.sameDtype(input, output, op)
        CollectiveChecks.shape(output, gatheredShape(input, d, op), "output", op)
        disjoint(output, input, op)
        onDevice(CollectiveOp.AllGather, null, d, input)
        onDevice(CollectiveOp.AllGather, null, d, output)
        return d
    }

    /** The shape [Communicator.reduceScatter] returns, after checking [input], [op] and [dim]. */
    public fun reduceScatterShape(input: Tensor, op: ReduceOp, dim: Int): List<Int> {
        val name = "reduceScatter"
        tensor(input, name, "input", written = false)
        reduction(op, input.dtype, name)
        val d = dim(input, dim, name)
        CollectiveChecks.divisible(input, d, worldSize, name)
        onDevice(CollectiveOp.ReduceScatter, op, d, input)
        return input.shape.toMutableList().also { it[d] = it[d] / worldSize }
    }

    /** [Communicator.reduceScatterInto]. Returns the normalised dim. */
    public fun reduceScatterInto(output: Tensor, input: Tensor, op: ReduceOp, dim: Int): Int {
        val name = "reduceScatter"
        val expected = reduceScatterShape(input, op, dim)
        tensor(output, name, "output", written = true)
        CollectiveChecks.sameDtype(input, output, name)
        CollectiveChecks.shape(output, expected, "output", name)
        disjoint(output, input, name)
        val d = normalise(input, dim)
        onDevice(CollectiveOp.ReduceScatter, op, d, output)
        return d
    }

    /** [Communicator.gather]. Returns the normalised dim; the root's output shape is [gatherShape]'s. */
    public fun gather(input: Tensor, root: Int, dim: Int): Int {
        gatherShape(input, root, dim)
        return normalise(input, dim)
    }

    /** [Communicator.gather]'s checks, as [gather]; returns the shape of the root's output ([input]'s with [dim] times the world size). */
    public fun gatherShape(input: Tensor, root: Int, dim: Int): List<Int> {
        CollectiveChecks.root(root, worldSize, "gather")
        return gatheringShape(input, dim, CollectiveOp.Gather)
    }

    /**
     * [Communicator.scatter] on rank [rank]: [output] everywhere; [input] on the root only (required
     * there, of `output`'s shape times the world size along [dim]; ignored elsewhere). Returns the
     * normalised dim.
     */
    public fun scatter(output: Tensor, input: Tensor?, root: Int, rank: Int, dim: Int): Int {
        val name = "scatter"
        CollectiveChecks.root(root, worldSize, name)
        tensor(output, name, "output", written = true)
        val d = dim(output, dim, name)
        val expected = gatheredShape(output, d, name)
        if (rank == root) {
            require(input != null) {
                "$name: rank $root is the root and must pass an input of shape $expected (the outputs of all ranks joined along dim $d); got null"
            }
            tensor(input, name, "root's input", written = false)
            CollectiveChecks.sameDtype(input, output, name)
            CollectiveChecks.shape(input, expected, "the root's input", name)
            disjoint(output, input, name)
        }
        if (rank == root) onDevice(CollectiveOp.Scatter, null, d, input)
        onDevice(CollectiveOp.Scatter, null, d, output)
        return d
    }

    /** [Communicator.allToAll]. Returns the normalised dim. */
    public fun allToAll(input: Tensor, dim: Int): Int {
        val name = "allToAll"
        tensor(input, name, "input", written = false)
        val d = dim(input, dim, name)
        CollectiveChecks.divisible(input, d, worldSize, name)
        onDevice(CollectiveOp.AllToAll, null, d, input)
        return d
    }

    /**
     * The shape [Communicator.allGatherV] returns on rank [rank], after checking [input] and [sizes]:
     * [input]'s shape with dim 0 the sum of [sizes]. Nothing is moved or recorded.
     */
    public fun allGatherVShape(input: Tensor, sizes: List<Int>, rank: Int): List<Int> {
        val name = "allGatherV"
        tensor(input, name, "input", written = false)
        unevenOnDevice(input, name)
        CollectiveChecks.dim(input, 0, name)
        val total = sizes(sizes, "sizes", name)
        require(sizes[rank] == input.shape[0]) {
            "$name: sizes[$rank] is ${sizes[rank]} but this rank's input has ${input.shape[0]} rows (dim 0 of shape ${input.shape}); " +
                "sizes[r] must be rank r's row count, so pass ${input.shape[0]} at index $rank"
        }
        return rowsShape(input, total, name)
    }

    /** [Communicator.allGatherVInto] on rank [rank]. */
    public fun allGatherVInto(output: Tensor, input: Tensor, sizes: List<Int>, rank: Int) {
        val name = "allGatherV"
        val expected = allGatherVShape(input, sizes, rank)
        tensor(output, name, "output", written = true)
        unevenOnDevice(output, name)
        CollectiveChecks.sameDtype(input, output, name)
        CollectiveChecks.shape(output, expected, "output", name)
        disjoint(output, input, name)
    }

    /**
     * The shape [Communicator.reduceScatterV] returns on rank [rank], after checking [input], [op]
     * and [sizes]: [input]'s shape with dim 0 `sizes[rank]`; the sizes must add up to [input]'s dim 0.
     */
    public fun reduceScatterVShape(input: Tensor, sizes: List<Int>, op: ReduceOp, rank: Int): List<Int> {
        val name = "reduceScatterV"
        tensor(input, name, "input", written = false)
        unevenOnDevice(input, name)
        reduction(op, input.dtype, name)
        CollectiveChecks.dim(input, 0, name)
        val total = sizes(sizes, "sizes", name)
        require(total == input.shape[0].toLong()) {
            "$name: the sizes add up to $total rows but the input has ${input.shape[0]} (dim 0 of shape ${input.shape}); " +
                "pass sizes whose sum is the input's row count"
        }
        return input.shape.toMutableList().also { it[0] = sizes[rank] }
    }

    /** [Communicator.reduceScatterVInto] on rank [rank]. */
    public fun reduceScatterVInto(output: Tensor, input: Tensor, sizes: List<Int>, op: ReduceOp, rank: Int) {
        val name = "reduceScatterV"
        val expected = reduceScatterVShape(input, sizes, op, rank)
        tensor(output, name, "output", written = true)
        unevenOnDevice(output, name)
        CollectiveChecks.sameDtype(input, output, name)
        CollectiveChecks.shape(output, expected, "output", name)
        disjoint(output, input, name)
    }

    /**
     * The shape [Communicator.allToAllV] returns, after checking [input] and the splits: [input]'s
     * shape with dim 0 the sum of [outputSplits]; [inputSplits] must add up to [input]'s dim 0.
     */
    public fun allToAllVShape(input: Tensor, inputSplits: List<Int>, outputSplits: List<Int>): List<Int> {
        val name = "allToAllV"
        tensor(input, name, "input", written = false)
        unevenOnDevice(input, name)
        CollectiveChecks.dim(input, 0, name)
        val sent = sizes(inputSplits, "inputSplits", name)
        require(sent == input.shape[0].toLong()) {
            "$name: inputSplits add up to $sent rows but the input has ${input.shape[0]} (dim 0 of shape ${input.shape}); " +
                "pass inputSplits whose sum is the input's row count"
        }
        val received = sizes(outputSplits, "outputSplits", name)
        return rowsShape(input, received, name)
    }

    /** [Communicator.allToAllVInto]. */
    public fun allToAllVInto(output: Tensor, input: Tensor, inputSplits: List<Int>, outputSplits: List<Int>) {
        val name = "allToAllV"
        val expected = allToAllVShape(input, inputSplits, outputSplits)
        tensor(output, name, "output", written = true)
        unevenOnDevice(output, name)
        CollectiveChecks.sameDtype(input, output, name)
        CollectiveChecks.shape(output, expected, "output", name)
        disjoint(output, input, name)
    }

    /** Per-rank row counts: one per rank, none negative. Returns their sum (a `Long`). */
    private fun sizes(sizes: List<Int>, what: String, operation: String): Long {
        require(sizes.size == worldSize) {
            "$operation: $what has ${sizes.size} entries but the world has $worldSize ranks; pass one row count per rank"
        }
        var total = 0L
        for (i in 0 until worldSize) {
            val v = sizes[i]
            require(v >= 0) { "$operation: $what[$i] is $v; row counts must be >= 0" }
            total += v
        }
        return total
    }

    /** [t]'s shape with dim 0 set to [rows], refused when [rows] does not fit a dimension or the elements exceed [maxCount]. */
    private fun rowsShape(t: Tensor, rows: Long, operation: String): List<Int> {
        require(rows <= Int.MAX_VALUE) {
            "$operation: the sizes add up to $rows rows, more than a dimension holds (${Int.MAX_VALUE}); split the exchange into several calls"
        }
        val rowElements = t.stride(0)
        val fits = Math.multiplyHigh(rows, rowElements) == 0L && rows * rowElements >= 0 && rows * rowElements <= maxCount
        require(fits) {
            "$operation: the result would have $rows rows of $rowElements elements, more than this backend moves in one call ($maxCount); " +
                "split the exchange into several calls"
        }
        return t.shape.toMutableList().also { it[0] = rows.toInt() }
    }

    /** [Communicator.send]. */
    public fun send(tensor: Tensor, dst: Int, tag: Int) {
        CollectiveChecks.peer(dst, worldSize, "send", allowAny = false)
        tag(tag, "send", allowAny = false)
        tensor(tensor, "send", "tensor", written = false)
        messageLimits(dst, tag, "send", sending = true, tensor = true)
    }

    /** [Communicator.recv]. */
    public fun recv(tensor: Tensor, src: Int, tag: Int) {
        CollectiveChecks.peer(src, worldSize, "recv", allowAny = true)
        tag(tag, "recv", allowAny = true)
        tensor(tensor, "recv", "tensor", written = true)
        messageLimits(src, tag, "recv", sending = false, tensor = true)
    }

    /** [Communicator.sendObject]'s destination and tag, as [send] checks them. */
    public fun sendObject(dst: Int, tag: Int) {
        val name = "sendObject"
        CollectiveChecks.peer(dst, worldSize, name, allowAny = false)
        tag(tag, name, allowAny = false)
        messageLimits(dst, tag, name, sending = true, tensor = false)
    }

    /** [Communicator.recvObject]'s source and tag, as [recv] checks them. */
    public fun recvObject(src: Int, tag: Int) {
        val name = "recvObject"
        CollectiveChecks.peer(src, worldSize, name, allowAny = true)
        tag(tag, name, allowAny = true)
        messageLimits(src, tag, name, sending = false, tensor = false)
    }

    /**
     * [Communicator.sendRecv]: every element as [send] or [recv] checks it, named
     * `sendRecv (element i, a send|a receive)`; a receive tensor that shares memory with another
     * element's tensor is refused (the batch's transfers run concurrently).
     */
    public fun sendRecv(ops: List<PointToPoint>) {
        for ((i, o) in ops.withIndex()) {
            val name = sendRecvElement(i, o)
            CollectiveChecks.peer(o.peer, worldSize, name, allowAny = !o.isSend)
            tag(o.tag, name, allowAny = !o.isSend)
            tensor(o.tensor, name, "tensor", written = !o.isSend)
            messageLimits(o.peer, o.tag, name, sending = o.isSend, tensor = true)
        }
        for ((i, o) in ops.withIndex()) {
            if (o.isSend) continue
            for ((j, other) in ops.withIndex()) {
                if (j == i || (!other.isSend && j < i)) continue
                require(!overlaps(o.tensor, other.tensor)) {
                    "${sendRecvElement(i, o)}: its tensor shares memory with the tensor of element $j; " +
                        "the transfers of a batch run concurrently, so give every receive a buffer of its own"
                }
            }
        }
    }

    /**
     * [Communicator.probe]: the peer and tag, then [PointToPointLimits.noProbeReason]
     * ([UnsupportedOperationException] where the library cannot probe); the other limits do not
     * apply to a probe.
     */
    public fun probe(src: Int, tag: Int) {
        CollectiveChecks.peer(src, worldSize, "probe", allowAny = true)
        tag(tag, "probe", allowAny = true)
        pointToPointLimits?.let { limits ->
            limits.noProbeReason?.let { why ->
                throw UnsupportedOperationException(
                    "probe: ${limits.backendName} cannot inspect a message before receiving it ($why); " +
                        "send the size first (e.g. a one-element Int64 tensor), then the payload",
                )
            }
        }
    }

    /**
     * [Communicator.split]'s [color]: null (this rank opts out) or >= 0. Negative colors are MPI's
     * `MPI_UNDEFINED` and NCCL's `NCCL_SPLIT_NOCOLOR`, which the libraries read as "no group": null
     * says that, on every backend.
     */
    public fun split(color: Int?) {
        require(color == null || color >= 0) { "split: color must be >= 0, or null to opt out; got $color" }
    }

    /** [Communicator.group]'s [ranks]: not empty, distinct, in range. */
    public fun group(ranks: List<Int>) {
        CollectiveChecks.group(ranks, worldSize)
    }

    /** A tag: >= 0 and at most [maxTag], or [Communicator.ANY_TAG] when [allowAny]. */
    public fun tag(tag: Int, operation: String, allowAny: Boolean) {
        CollectiveChecks.tag(tag, operation, allowAny)
        require(tag <= maxTag) {
            "$operation: tag $tag is above the largest tag this backend's library accepts ($maxTag, its MPI_TAG_UB); pass a tag in 0..$maxTag"
        }
    }

    /** [op] on [dtype] as the core defines it ([CollectiveChecks.op]), then as the library reduces it ([reductionRefusal]). */
    private fun reduction(op: ReduceOp, dtype: DType, operation: String) {
        CollectiveChecks.op(op, dtype, operation)
        reductionRefusal?.invoke(op, dtype)?.let { throw IllegalArgumentException("$operation: $it") }
    }

    /**
     * What [pointToPointLimits] refuses of a message to or from [peer] with [tag] ([sending]: a send);
     * [tensor]: a tensor message (the object messages have no device copy to suggest).
     */
    private fun messageLimits(peer: Int, tag: Int, operation: String, sending: Boolean, tensor: Boolean) {
        val limits = pointToPointLimits ?: return
        val backend = limits.backendName
        if (!sending) {
            limits.noAnySourceReason?.let { why ->
                require(peer != Communicator.ANY_SOURCE) { "$operation: $backend cannot receive from ANY_SOURCE ($why); pass the sender's rank" }
            }
        }
        limits.untaggedReason?.let { why ->
            require(tag == 0 || (!sending && tag == Communicator.ANY_TAG)) {
                "$operation: tag $tag is not supported by $backend: $why; pass tag 0" + if (!sending && tensor) " or ANY_TAG" else ""
            }
        }
        limits.noSelfMessageReason?.let { why ->
            require(peer != limits.rank) {
                val copy = if (device.isGpu) "copy on the device instead" else "copy the tensor instead"
                when {
                    !tensor -> "$operation: rank ${limits.rank} cannot ${if (sending) "send to" else "receive from"} itself on $backend"
                    sending -> "$operation: rank ${limits.rank} cannot send to itself on $backend ($why); $copy"
                    else -> "$operation: rank ${limits.rank} cannot receive from itself on $backend; $copy"
                }
            }
        }
    }

    private fun dim(t: Tensor, dim: Int, operation: String): Int {
        CollectiveChecks.dim(t, dim, operation)
        return normalise(t, dim)
    }

    private fun gatheredShape(t: Tensor, d: Int, operation: String): List<Int> {
        val shape = CollectiveShapes.gathered(t, d, worldSize, operation)
        val total = Math.multiplyHigh(t.numel, worldSize.toLong()) == 0L && t.numel * worldSize <= maxCount
        require(total) {
            "$operation: the result would have ${t.numel} x $worldSize elements, more than this backend moves in one call ($maxCount); split the tensor"
        }
        return shape
    }

    private fun disjoint(output: Tensor, input: Tensor, operation: String) {
        require(!overlaps(output, input)) {
            "$operation: the output and the input share memory; pass an output that does not overlap the input (this call is out of place)"
        }
    }

    private fun overlaps(a: Tensor, b: Tensor): Boolean {
        if (a.device != b.device || a.byteSize == 0L || b.byteSize == 0L) return false
        return if (a.device.isGpu) {
            a.address < b.address + b.byteSize && b.address < a.address + a.byteSize
        } else {
            a.segment.asOverlappingSlice(b.segment).isPresent
        }
    }

    public companion object {
        /** The operation name of element [index] of a [Communicator.sendRecv] batch in messages. */
        @JvmStatic
        public fun sendRecvElement(index: Int, op: PointToPoint): String =
            "sendRecv (element $index, a ${if (op.isSend) "send" else "receive"})"

        /** [dim] of [t] counted from the front (negative counts from the end); no range check. */
        @JvmStatic
        public fun normalise(t: Tensor, dim: Int): Int = if (dim < 0) dim + t.ndim else dim
    }
}
