package dev.tpcomm.nccl

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.Communicator
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.MessageInfo
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.coroutines.NativeDispatcher
import dev.tpcomm.coroutines.NativeRequest
import dev.tpcomm.spi.CollectiveChecks
import dev.tpcomm.spi.CollectiveShapes
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.Job
import kotlinx.coroutines.withContext
import kotlinx.serialization.KSerializer
import kotlinx.serialization.json.Json
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.lang.ref.Cleaner
import java.util.ArrayDeque
import java.util.concurrent.CountDownLatch
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicBoolean
import java.util.concurrent.atomic.AtomicReference
import kotlin.coroutines.EmptyCoroutineContext

/**
 * A [Communicator] over NCCL's API ([NcclApi]) and a GPU runtime ([DeviceRuntime]): the
 * stream-ordered engine shared by the `nccl` and `rccl` backends.
 *
 * **Execution.** Each communicator owns one [NativeDispatcher] thread (which has this
 * communicator's device current) and one non-blocking stream. A call validates its arguments on the
 * caller's thread, is queued on the native thread in call order, enqueues the library call(s) on the
 * stream, records an event after them and suspends until the event completes; the dispatcher's
 * progress loop polls the event and `ncclCommGetAsyncError`. Several calls may be in flight at once
 * (`async(start = UNDISPATCHED)`); they complete in stream order.
 *
 * **Tensors.** Only device tensors on [device] are accepted; a host tensor fails with
 * [IllegalArgumentException] and is never copied behind the caller's back. Outputs this class
 * allocates ([allGather], [reduceScatter], [gather], [allToAll]) are device memory freed when the
 * returned tensor becomes unreachable; the `*Into` variants allocate nothing. Collectives along a
 * dimension other than 0 (with a non-trivial outer size) rearrange data on the device with 2-D
 * async copies through a temporary device buffer.
 *
 * **Library limits, refused with [IllegalArgumentException] before anything runs:** bitwise
 * reductions (NCCL and RCCL have none); [ReduceOp.Avg] and bfloat16 on libraries older than 2.10;
 * point-to-point tags other than 0 (NCCL matches messages by order only), [Communicator.ANY_SOURCE],
 * and sends to oneself. [probe] is not available (UnsupportedOperationException).
 *
 * **Failure.** Past [CommConfig.timeout], on an asynchronous error, on a failed library call, or
 * when a call in flight is cancelled, the communicator calls `ncclCommAbort`; that call and every
 * pending and later call fail with a [CommunicationException] carrying the flight recorder's dump.
 * Peers learn of it through NCCL (`ncclRemoteError`) or their own deadline. Temporary device
 * buffers of calls that did not complete are not freed (the device may still touch them).
 *
 * Thread-safety: every method may be called from any thread or coroutine.
 */
public class NcclCommunicator internal constructor(
    private val api: NcclApi,
    private val runtime: DeviceRuntime,
    private val dispatcher: NativeDispatcher,
    private val comm: Long,
    private val stream: Long,
    override val rank: Int,
    override val worldSize: Int,
    override val device: Device,
    override val backendName: String,
    private val config: CommConfig,
    /** The library's version code as `ncclGetVersion` reports it (e.g. 23007 for 2.30.7). */
    public val libraryVersion: Int,
    private val commConfig: NcclCommConfig,
    private val onClose: AutoCloseable? = null,
) : Communicator, dev.tpcomm.coroutines.FlightRecorded {
    private val recorder = FlightRecorder(config.flightRecorderSize, rank, backendName, worldSize = worldSize, dumpDirectory = config.flightRecorderDir)
    private val failure = AtomicReference<CommunicationException?>(null)
    private val closed = AtomicBoolean(false)
    private val commReleased = AtomicBoolean(false)
    private val timeoutNanos = config.timeout.inWholeNanoseconds

    // Touched on the native thread only.
    private val events = ArrayDeque<Long>()
    private val allEvents = ArrayList<Long>()
    private var scratch = 0L
    private var inFlight = 0
    private val status = IntArray(1)

    /** True once the communicator was aborted (by a failure, a timeout, a cancellation) or closed. */
    public val isAborted: Boolean get() = failure.get() != null

    /** The JSON dump of this communicator's recent operations (see [FlightRecorder.dumpJson]). */
    public fun flightRecorderDump(): String = recorder.dumpJson()

    /** This communicator's flight recorder. */
    override val flightRecorder: FlightRecorder get() = recorder

    // ---------------------------------------------------------------- collectives

    override suspend fun allReduce(tensor: Tensor, op: ReduceOp): Tensor {
        val name = "allReduce"
        checkTensor(tensor, name)
        val red = checkOp(op, tensor.dtype, name)
        return run(name, tensor, op = op, signature = sig(name, tensor, op)) {
            nccl(api.allReduce(tensor.address, tensor.address, tensor.numel, dt(tensor), red, comm, stream), "ncclAllReduce")
            tensor
        }
    }

    override suspend fun broadcast(tensor: Tensor, root: Int): Tensor {
        val name = "broadcast"
        checkTensor(tensor, name)
        CollectiveChecks.root(root, worldSize, name)
        return run(name, tensor, root = root, signature = sig(name, tensor, root = root)) {
            nccl(api.broadcast(tensor.address, tensor.address, tensor.numel, dt(tensor), root, comm, stream), "ncclBroadcast")
            tensor
        }
    }

    override suspend fun reduce(tensor: Tensor, root: Int, op: ReduceOp): Tensor {
        val name = "reduce"
        checkTensor(tensor, name)
        CollectiveChecks.root(root, worldSize, name)
        val red = checkOp(op, tensor.dtype, name)
        return run(name, tensor, root = root, op = op, signature = sig(name, tensor, op, root)) {
            nccl(api.reduce(tensor.address, tensor.address, tensor.numel, dt(tensor), red, root, comm, stream), "ncclReduce")
            tensor
        }
    }

    override suspend fun allGather(input: Tensor, dim: Int): Tensor {
        val name = "allGather"
        checkTensor(input, name)
        val shape = CollectiveShapes.allGather(input, worldSize, dim)
        return run(name, input, dim = dim, signature = sig(name, input, dim = dim)) {
            val out = allocateOutput(input.dtype, shape)
            issueAllGather(out, input, dim)
            out
        }
    }

    override suspend fun allGatherInto(output: Tensor, input: Tensor, dim: Int): Tensor {
        val name = "allGather"
        checkTensor(input, name)
        checkTensor(output, name)
        CollectiveChecks.sameDtype(input, output, name)
        CollectiveChecks.shape(output, CollectiveShapes.allGather(input, worldSize, dim), "output", name)
        return run(name, input, dim = dim, signature = sig(name, input, dim = dim)) {
            issueAllGather(output, input, dim)
            output
        }
    }

    override suspend fun reduceScatter(input: Tensor, op: ReduceOp, dim: Int): Tensor {
        val name = "reduceScatter"
        checkTensor(input, name)
        val shape = CollectiveShapes.reduceScatter(input, worldSize, dim)
        val red = checkOp(op, input.dtype, name)
        return run(name, input, op = op, dim = dim, signature = sig(name, input, op, dim = dim)) {
            val out = allocateOutput(input.dtype, shape)
            issueReduceScatter(out, input, red, dim)
            out
        }
    }

    override suspend fun reduceScatterInto(output: Tensor, input: Tensor, op: ReduceOp, dim: Int): Tensor {
        val name = "reduceScatter"
        checkTensor(input, name)
        checkTensor(output, name)
        CollectiveChecks.sameDtype(input, output, name)
        CollectiveChecks.shape(output, CollectiveShapes.reduceScatter(input, worldSize, dim), "output", name)
        val red = checkOp(op, input.dtype, name)
        return run(name, input, op = op, dim = dim, signature = sig(name, input, op, dim = dim)) {
            issueReduceScatter(output, input, red, dim)
            output
        }
    }

    override suspend fun gather(input: Tensor, root: Int, dim: Int): Tensor? {
        val name = "gather"
        checkTensor(input, name)
        CollectiveChecks.root(root, worldSize, name)
        val shape = CollectiveShapes.allGather(input, worldSize, dim)
        val outer = outerCount(input.shape, norm(input, dim))
        return run(name, input, root = root, dim = dim, signature = sig(name, input, root = root, dim = dim)) {
            if (rank == root) {
                val out = allocateOutput(input.dtype, shape)
                val blocks = if (outer == 1L) out.address else temp(out.byteSize)
                group {
                    for (r in 0 until worldSize) {
                        val slot = blocks + r * input.byteSize
                        if (r == rank) {
                            cuda(runtime.memcpyAsync(slot, input.address, input.byteSize, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, stream), "memcpyAsync")
                        } else {
                            nccl(api.recv(slot, input.byteSize, BYTES, r, comm, stream), "ncclRecv")
                        }
                    }
                }
                if (outer != 1L) blocksToColumns(out.address, blocks, input.byteSize, outer)
                out
            } else {
                group { nccl(api.send(input.address, input.byteSize, BYTES, root, comm, stream), "ncclSend") }
                null
            }
        }
    }

    override suspend fun scatter(output: Tensor, input: Tensor?, root: Int, dim: Int) {
        val name = "scatter"
        checkTensor(output, name)
        CollectiveChecks.root(root, worldSize, name)
        CollectiveChecks.dim(output, dim, name)
        if (rank == root) requireNotNull(input) { "$name: the root (rank $root) must pass the input to scatter, got null" }
        if (input != null) { // read on the root only, but checked wherever given so every rank refuses the same mistake
            checkTensor(input, name)
            CollectiveChecks.sameDtype(input, output, name)
            CollectiveChecks.shape(output, CollectiveShapes.reduceScatter(input, worldSize, dim), "output", name)
        }
        val outer = outerCount(output.shape, norm(output, dim))
        run(name, output, root = root, dim = dim, signature = sig(name, output, root = root, dim = dim)) {
            if (rank == root) {
                val src = input!!
                val chunk = output.byteSize
                val blocks = if (outer == 1L) src.address else temp(src.byteSize).also { columnsToBlocks(it, src.address, chunk, outer) }
                group {
                    for (r in 0 until worldSize) {
                        val slot = blocks + r * chunk
                        if (r == rank) {
                            cuda(runtime.memcpyAsync(output.address, slot, chunk, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, stream), "memcpyAsync")
                        } else {
                            nccl(api.send(slot, chunk, BYTES, r, comm, stream), "ncclSend")
                        }
                    }
                }
            } else {
                group { nccl(api.recv(output.address, output.byteSize, BYTES, root, comm, stream), "ncclRecv") }
            }
        }
    }

    override suspend fun allToAll(input: Tensor, dim: Int): Tensor {
        val name = "allToAll"
        checkTensor(input, name)
        CollectiveChecks.dim(input, dim, name)
        CollectiveChecks.divisible(input, dim, worldSize, name)
        val outer = outerCount(input.shape, norm(input, dim))
        return run(name, input, dim = dim, signature = sig(name, input, dim = dim)) {
            val out = allocateOutput(input.dtype, input.shape)
            val chunk = input.byteSize / worldSize
            val sendBlocks = if (outer == 1L) input.address else temp(input.byteSize).also { columnsToBlocks(it, input.address, chunk, outer) }
            val recvBlocks = if (outer == 1L) out.address else temp(input.byteSize)
            group {
                for (r in 0 until worldSize) {
                    if (r == rank) {
                        cuda(runtime.memcpyAsync(recvBlocks + r * chunk, sendBlocks + r * chunk, chunk, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, stream), "memcpyAsync")
                    } else {
                        nccl(api.send(sendBlocks + r * chunk, chunk, BYTES, r, comm, stream), "ncclSend")
                        nccl(api.recv(recvBlocks + r * chunk, chunk, BYTES, r, comm, stream), "ncclRecv")
                    }
                }
            }
            if (outer != 1L) blocksToColumns(out.address, recvBlocks, chunk, outer)
            out
        }
    }

    /**
     * Every rank's [value] in rank order. Objects live on the host, so this encodes them as JSON
     * (kotlinx-serialization) and moves the bytes through temporary device buffers on this
     * communicator's stream (the only host staging this class does): lengths first, then the padded payloads.
     */
    override suspend fun <T> allGatherObject(value: T, serializer: KSerializer<T>): List<T> {
        val bytes = JSON.encodeToString(serializer, value).encodeToByteArray()
        val lengths = stagedAllGather("allGatherObject", longBytes(bytes.size.toLong()))
        val sizes = List(worldSize) { r -> readLong(lengths, r * 8) }
        val max = sizes.max().toInt()
        val all = stagedAllGather("allGatherObject", bytes.copyOf(max))
        return List(worldSize) { r -> JSON.decodeFromString(serializer, String(all, r * max, sizes[r].toInt(), Charsets.UTF_8)) }
    }

    /** [root]'s [value] on every rank, moved as JSON bytes through temporary device buffers (see [allGatherObject]). */
    override suspend fun <T> broadcastObject(value: T?, root: Int, serializer: KSerializer<T>): T {
        CollectiveChecks.root(root, worldSize, "broadcastObject")
        if (rank == root) requireNotNull(value) { "broadcastObject: the root (rank $root) must pass a value, got null" }
        @Suppress("UNCHECKED_CAST")
        val bytes = if (rank == root) JSON.encodeToString(serializer, value as T).encodeToByteArray() else ByteArray(0)
        val length = readLong(stagedBroadcast("broadcastObject", longBytes(bytes.size.toLong()), root), 0)
        val payload = stagedBroadcast("broadcastObject", if (rank == root) bytes else ByteArray(length.toInt()), root)
        return JSON.decodeFromString(serializer, String(payload, Charsets.UTF_8))
    }

    private suspend fun stagedAllGather(name: String, bytes: ByteArray): ByteArray = run(name, null) {
        val n = bytes.size.toLong()
        val host = Arena.ofShared()
        try {
            val seg = host.allocate((n * worldSize).coerceAtLeast(1))
            MemorySegment.copy(bytes, 0, seg, ValueLayout.JAVA_BYTE, 0, bytes.size)
            val dev = temp(n * worldSize)
            cuda(runtime.memcpyAsync(dev + rank * n, seg.address(), n, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, stream), "memcpyAsync")
            nccl(api.allGather(dev + rank * n, dev, n, BYTES, comm, stream), "ncclAllGather")
            cuda(runtime.memcpyAsync(seg.address(), dev, n * worldSize, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, stream), "memcpyAsync")
            awaitStream(this)
            seg.asSlice(0, n * worldSize).toArray(ValueLayout.JAVA_BYTE)
        } finally {
            if (failure.get() == null) host.close() // after a failure the device may still write into it: leave it to the GC
        }
    }

    private suspend fun stagedBroadcast(name: String, bytes: ByteArray, root: Int): ByteArray = run(name, null, root = root) {
        val n = bytes.size.toLong()
        val host = Arena.ofShared()
        try {
            val seg = host.allocate(n.coerceAtLeast(1))
            MemorySegment.copy(bytes, 0, seg, ValueLayout.JAVA_BYTE, 0, bytes.size)
            val dev = temp(n)
            if (rank == root) cuda(runtime.memcpyAsync(dev, seg.address(), n, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, stream), "memcpyAsync")
            nccl(api.broadcast(dev, dev, n, BYTES, root, comm, stream), "ncclBroadcast")
            cuda(runtime.memcpyAsync(seg.address(), dev, n, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, stream), "memcpyAsync")
            awaitStream(this)
            seg.asSlice(0, n).toArray(ValueLayout.JAVA_BYTE)
        } finally {
            if (failure.get() == null) host.close()
        }
    }

    override suspend fun barrier() {
        run("barrier", null, signature = sig("barrier", null)) {
            if (scratch == 0L) {
                val p = LongArray(1)
                cuda(runtime.malloc(p, 4), "malloc")
                scratch = p[0]
            }
            nccl(api.allReduce(scratch, scratch, 1, NcclDataType.INT32, NcclRedOp.SUM, comm, stream), "ncclAllReduce")
        }
    }

    override suspend fun send(tensor: Tensor, dst: Int, tag: Int) {
        val name = "send"
        checkTensor(tensor, name)
        CollectiveChecks.peer(dst, worldSize, name, allowAny = false)
        CollectiveChecks.tag(tag, name, allowAny = false)
        require(tag == 0) { "$name: tag $tag is not supported by $backendName: NCCL matches messages between two ranks by order only; pass tag 0" }
        require(dst != rank) { "$name: rank $rank cannot send to itself on $backendName (a lone ncclSend to oneself never completes); copy on the device instead" }
        run(name, tensor, peer = dst) {
            nccl(api.send(tensor.address, tensor.byteSize, BYTES, dst, comm, stream), "ncclSend")
        }
    }

    override suspend fun recv(tensor: Tensor, src: Int, tag: Int): MessageInfo {
        val name = "recv"
        checkTensor(tensor, name)
        require(src != Communicator.ANY_SOURCE) { "$name: $backendName cannot receive from ANY_SOURCE (NCCL needs the sender's rank); pass the sender's rank" }
        CollectiveChecks.peer(src, worldSize, name, allowAny = false)
        CollectiveChecks.tag(tag, name, allowAny = true)
        require(tag == 0 || tag == Communicator.ANY_TAG) {
            "$name: tag $tag is not supported by $backendName: NCCL matches messages between two ranks by order only; pass tag 0 or ANY_TAG"
        }
        require(src != rank) { "$name: rank $rank cannot receive from itself on $backendName; copy on the device instead" }
        run(name, tensor, peer = src) {
            nccl(api.recv(tensor.address, tensor.byteSize, BYTES, src, comm, stream), "ncclRecv")
        }
        return MessageInfo(src, 0, tensor.byteSize)
    }

    /** Not available: NCCL and RCCL cannot look at a message before receiving it. Always throws [UnsupportedOperationException]. */
    override suspend fun probe(src: Int, tag: Int): MessageInfo =
        throw UnsupportedOperationException(
            "probe: $backendName cannot inspect a message before receiving it; send the size first (e.g. a one-element Int64 tensor), then the payload",
        )

    override suspend fun split(color: Int?, key: Int): Communicator? {
        val name = "split"
        require(color == null || color >= 0) { "$name: color must be >= 0, or null to opt out; got $color" }
        if (libraryVersion < NcclVersion.COMM_SPLIT) {
            throw UnsupportedOperationException(
                "$name: ${api.libraryName} ${NcclVersion.format(libraryVersion)} has no ncclCommSplit (needs 2.18 or later); upgrade the library",
            )
        }
        return run(name, null, onStream = false) {
            val out = LongArray(1)
            val code = api.commSplit(comm, color ?: NcclVersion.SPLIT_NOCOLOR, key, out, commConfig)
            val child = out[0]
            if (code == NcclResult.IN_PROGRESS) {
                waitReady(if (child != 0L) child else comm, "ncclCommSplit", this, alsoAbort = child)
            } else {
                nccl(code, "ncclCommSplit")
            }
            if (child == 0L) {
                null
            } else {
                val counts = IntArray(1)
                nccl(api.commCount(child, counts), "ncclCommCount")
                val ranks = IntArray(1)
                nccl(api.commUserRank(child, ranks), "ncclCommUserRank")
                val s = LongArray(1)
                cuda(runtime.streamCreateNonBlocking(s), "streamCreateWithFlags")
                val childDispatcher = NativeDispatcher("tpcomm-$backendName-rank${ranks[0]}-split")
                childDispatcher.dispatch(EmptyCoroutineContext, Runnable { runtime.setDevice(deviceIndex(device)) })
                NcclCommunicator(
                    api, runtime, childDispatcher, child, s[0], ranks[0], counts[0], device, backendName,
                    config.copy(worldSize = counts[0], rank = ranks[0], localRank = config.localRank),
                    libraryVersion, commConfig,
                )
            }
        }
    }

    /**
     * Releases the communicator: waits (up to [CommConfig.timeout]) for the calls already queued,
     * then `ncclCommDestroy` (or `ncclCommAbort` after a failure), destroys the stream and events and
     * ends the native thread. Calls still in flight fail with [CommunicatorAbortedException].
     * Idempotent; later calls throw [CommunicatorAbortedException].
     */
    override fun close() {
        if (!closed.compareAndSet(false, true)) return
        recorder.close()
        val done = CountDownLatch(1)
        val task = Runnable {
            try {
                nativeClose()
            } finally {
                done.countDown()
            }
        }
        if (dispatcher.isNativeThread) {
            task.run()
        } else {
            dispatcher.dispatch(EmptyCoroutineContext, task)
            done.await(timeoutNanos, TimeUnit.NANOSECONDS)
        }
        dispatcher.close()
        runCatching { onClose?.close() }
    }

    override fun toString(): String = "NcclCommunicator($backendName rank $rank of $worldSize on $device)"

    // ---------------------------------------------------------------- machinery

    /** State of one operation while it is being issued (native thread only). */
    private inner class Op(val name: String, val entry: FlightRecorder.Entry, val deadline: Long, val job: Job?) {
        val temps = ArrayList<Long>()

        fun nccl(code: Int, call: String) {
            when (code) {
                NcclResult.SUCCESS -> Unit
                NcclResult.IN_PROGRESS -> waitReady(comm, call, this)
                else -> throw fail(this, ncclError(code, call, this))
            }
        }

        fun cuda(code: Int, call: String) {
            if (code != DeviceRuntime.SUCCESS) throw fail(this, runtimeError(code, call, this))
        }

        fun temp(bytes: Long): Long {
            val p = LongArray(1)
            cuda(runtime.malloc(p, bytes.coerceAtLeast(1)), "malloc")
            temps += p[0]
            return p[0]
        }

        fun group(body: () -> Unit) {
            nccl(api.groupStart(), "ncclGroupStart")
            var error: Throwable? = null
            try {
                body()
            } catch (t: Throwable) {
                error = t
            }
            val end = api.groupEnd()
            if (error != null) throw error
            nccl(end, "ncclGroupEnd")
        }

        fun allocateOutput(dtype: DType, shape: List<Int>): Tensor {
            val bytes = shape.fold(1L) { a, d -> a * d } * dtype.byteSize
            val p = LongArray(1)
            cuda(runtime.malloc(p, bytes.coerceAtLeast(1)), "malloc")
            val t = Tensor.wrapDevice(device, p[0], dtype, *shape.toIntArray())
            CLEANER.register(t, DeviceFree(runtime, dispatcher, p[0]))
            return t
        }

        /** `count` contiguous blocks of `outer` rows of `rowBytes` each, at [blocks], into the columns of [dst]. */
        fun blocksToColumns(dst: Long, blocks: Long, blockBytes: Long, outer: Long) {
            val row = blockBytes / outer
            for (r in 0 until worldSize) {
                cuda(
                    runtime.memcpy2DAsync(dst + r * row, row * worldSize, blocks + r * blockBytes, row, row, outer, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, stream),
                    "memcpy2DAsync",
                )
            }
        }

        /** The inverse of [blocksToColumns]: column block `r` of [src] into contiguous block `r` at [blocks]. */
        fun columnsToBlocks(blocks: Long, src: Long, blockBytes: Long, outer: Long) {
            val row = blockBytes / outer
            for (r in 0 until worldSize) {
                cuda(
                    runtime.memcpy2DAsync(blocks + r * blockBytes, row, src + r * row, row * worldSize, row, outer, DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE, stream),
                    "memcpy2DAsync",
                )
            }
        }

        /**
         * checkConsistency: all-gathers every rank's signature of this call (staged through device
         * memory) and fails with [CollectiveMismatchException] naming the differing ranks and fields.
         */
        fun checkSignature(sig: LongArray) {
            val n = sig.size * 8L
            val host = Arena.ofShared()
            val seg = host.allocate(n * worldSize, 8)
            MemorySegment.copy(sig, 0, seg, ValueLayout.JAVA_LONG, rank * n, sig.size)
            val dev = temp(n * worldSize)
            cuda(runtime.memcpyAsync(dev + rank * n, seg.address() + rank * n, n, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, stream), "memcpyAsync")
            nccl(api.allGather(dev + rank * n, dev, n, BYTES, comm, stream), "ncclAllGather")
            cuda(runtime.memcpyAsync(seg.address(), dev, n * worldSize, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, stream), "memcpyAsync")
            awaitStream(this)
            val all = List(worldSize) { r -> LongArray(sig.size) { i -> seg.getAtIndex(ValueLayout.JAVA_LONG, (r * sig.size + i).toLong()) } }
            host.close()
            val bad = (0 until worldSize).filter { !all[it].contentEquals(all[0]) }
            if (bad.isEmpty()) return
            val fields = bad.flatMap { r -> SIG_FIELDS.indices.filter { all[r][it] != all[0][it] }.map { SIG_FIELDS[it] } }.distinct()
            val message = "collective mismatch (checkConsistency): ranks $bad differ from rank 0 in $fields; " +
                (listOf(0) + bad).joinToString("; ") { r -> "rank $r called ${describeSig(all[r])}" } + ". The communicator was aborted."
            throw fail(this, CollectiveMismatchException(message, rank, backendName, name, entry.sequence, bad, fields, dumpWith(this, message)))
        }

        fun issueAllGather(out: Tensor, input: Tensor, dim: Int) {
            val outer = outerCount(input.shape, norm(input, dim))
            if (outer == 1L) {
                nccl(api.allGather(input.address, out.address, input.numel, dt(input), comm, stream), "ncclAllGather")
            } else {
                val blocks = temp(out.byteSize)
                nccl(api.allGather(input.address, blocks, input.numel, dt(input), comm, stream), "ncclAllGather")
                blocksToColumns(out.address, blocks, input.byteSize, outer)
            }
        }

        fun issueReduceScatter(out: Tensor, input: Tensor, red: Int, dim: Int) {
            val outer = outerCount(input.shape, norm(input, dim))
            val src = if (outer == 1L) input.address else temp(input.byteSize).also { columnsToBlocks(it, input.address, out.byteSize, outer) }
            nccl(api.reduceScatter(src, out.address, out.numel, dt(input), red, comm, stream), "ncclReduceScatter")
        }
    }

    private suspend fun <T> run(
        name: String,
        tensor: Tensor?,
        root: Int = FlightRecorder.NONE,
        peer: Int = FlightRecorder.NONE,
        op: ReduceOp? = null,
        dim: Int = FlightRecorder.NONE,
        onStream: Boolean = true,
        signature: LongArray? = null,
        issue: Op.() -> T,
    ): T {
        if (closed.get()) {
            throw CommunicatorAbortedException("the communicator was closed; create a new one", rank, backendName, name, -1, null, recorder.dumpJson())
        }
        val issued = AtomicBoolean(false)
        try {
            return withContext(dispatcher) {
                val entry = recorder.start(name, tensor?.dtype, tensor?.shape, tensor?.byteSize ?: 0, root = root, peer = peer, reduceOp = op, dim = dim)
                failure.get()?.let { cause ->
                    val e = abortedError(name, entry.sequence, cause)
                    entry.fail(e)
                    throw e
                }
                val op = Op(name, entry, System.nanoTime() + timeoutNanos, coroutineContext[Job])
                issued.set(true)
                inFlight++
                try {
                    if (signature != null && config.checkConsistency && worldSize > 1) op.checkSignature(signature)
                    val result = op.issue()
                    if (onStream) {
                        val event = acquireEvent(op)
                        op.cuda(runtime.eventRecord(event, stream), "eventRecord")
                        dispatcher.await(completion(op, event))
                        events.addLast(event)
                    }
                    for (p in op.temps) runtime.free(p)
                    entry.complete()
                    result
                } catch (e: CancellationException) {
                    throw e
                } catch (e: CommunicationException) {
                    entry.fail(e)
                    throw e
                } catch (e: Throwable) {
                    val wrapped = CommunicationException(
                        "unexpected failure while issuing: $e", rank, backendName, name, entry.sequence, e, null,
                    )
                    throw fail(op, wrapped)
                } finally {
                    inFlight--
                }
            }
        } catch (e: CancellationException) {
            if (issued.get() && failure.get() == null) {
                abort(
                    CommunicatorAbortedException(
                        "a $name call in flight was cancelled (${e.message}); the other ranks cannot finish it, so the communicator was aborted",
                        rank, backendName, name, -1, e, recorder.dumpJson(),
                    ),
                )
            }
            throw e
        }
    }

    private fun completion(op: Op, event: Long): NativeRequest = NativeRequest {
        failure.get()?.let { cause -> throw abortedError(op.name, op.entry.sequence, cause) }
        when (val q = runtime.eventQuery(event)) {
            DeviceRuntime.SUCCESS -> {
                // A kernel that gave up on a failed peer also lets the event complete: check before reporting success.
                checkAsync(comm, op)
                return@NativeRequest true
            }
            DeviceRuntime.ERROR_NOT_READY -> Unit
            else -> throw fail(op, runtimeError(q, "eventQuery", op))
        }
        checkAsync(comm, op)
        if (System.nanoTime() - op.deadline > 0) throw fail(op, timeoutError(op))
        false
    }

    /** Spins on the native thread until [handle] leaves `ncclInProgress` (non-blocking init, split, enqueue). */
    private fun waitReady(handle: Long, call: String, op: Op, alsoAbort: Long = 0L) {
        var spins = 0
        while (true) {
            failure.get()?.let { cause -> throw abortedError(op.name, op.entry.sequence, cause) }
            val code = api.commGetAsyncError(handle, status)
            val state = if (code != NcclResult.SUCCESS) code else status[0]
            when (state) {
                NcclResult.SUCCESS -> return
                NcclResult.IN_PROGRESS -> Unit
                else -> {
                    if (alsoAbort != 0L && alsoAbort != comm) api.commAbort(alsoAbort)
                    throw fail(op, ncclError(state, call, op))
                }
            }
            if (System.nanoTime() - op.deadline > 0) {
                if (alsoAbort != 0L && alsoAbort != comm) api.commAbort(alsoAbort)
                throw fail(op, timeoutError(op))
            }
            if (++spins < 1000) Thread.onSpinWait() else Thread.sleep(0, 100_000)
        }
    }

    /** Waits on the native thread (inside an operation) until the stream's work so far is done; used only by the object collectives. */
    private fun awaitStream(op: Op) {
        val event = acquireEvent(op)
        op.cuda(runtime.eventRecord(event, stream), "eventRecord")
        val request = completion(op, event)
        var spins = 0
        while (!request.poll()) {
            // Blocking here keeps the issue order of the communicator's calls; a cancelled caller still gets out.
            if (op.job?.isActive == false) throw CancellationException("${op.name} was cancelled while waiting for the device")
            if (++spins < 1000) Thread.onSpinWait() else Thread.sleep(0, 100_000)
        }
        events.addLast(event)
    }

    private fun checkAsync(handle: Long, op: Op) {
        val code = api.commGetAsyncError(handle, status)
        val state = if (code != NcclResult.SUCCESS) code else status[0]
        if (state != NcclResult.SUCCESS && state != NcclResult.IN_PROGRESS) {
            throw fail(op, ncclError(state, "ncclCommGetAsyncError", op))
        }
    }

    private fun acquireEvent(op: Op): Long {
        events.pollFirst()?.let { return it }
        val e = LongArray(1)
        op.cuda(runtime.eventCreateDisableTiming(e), "eventCreateWithFlags")
        allEvents += e[0]
        return e[0]
    }

    /** Marks [op] failed with [error], aborts the communicator, and returns [error] for throwing. */
    private fun fail(op: Op, error: CommunicationException): CommunicationException {
        op.entry.fail(error)
        abort(error)
        return error
    }

    /** First failure wins: records it and calls `ncclCommAbort` on the native thread. */
    private fun abort(cause: CommunicationException) {
        if (!failure.compareAndSet(null, cause)) return
        recorder.recordAbort(cause)
        if (dispatcher.isNativeThread) {
            releaseComm(abort = true)
        } else {
            dispatcher.dispatch(EmptyCoroutineContext, Runnable { releaseComm(abort = true) })
        }
    }

    private fun releaseComm(abort: Boolean) {
        if (!commReleased.compareAndSet(false, true)) return
        if (abort) {
            api.commAbort(comm)
            return
        }
        val code = api.commDestroy(comm)
        if (code == NcclResult.IN_PROGRESS) {
            val deadline = System.nanoTime() + timeoutNanos
            while (System.nanoTime() - deadline < 0) {
                val c = api.commGetAsyncError(comm, status)
                if (c != NcclResult.SUCCESS || status[0] != NcclResult.IN_PROGRESS) return
                Thread.sleep(0, 100_000)
            }
            api.commAbort(comm)
        }
    }

    private fun nativeClose() {
        val busy = inFlight > 0
        failure.compareAndSet(
            null,
            CommunicatorAbortedException("the communicator was closed", rank, backendName, "close", recorder.nextSequenceNumber - 1, null, null),
        )
        releaseComm(abort = busy || failure.get()?.operation != "close")
        if (scratch != 0L) runtime.free(scratch)
        scratch = 0L
        for (e in allEvents) runtime.eventDestroy(e)
        allEvents.clear()
        events.clear()
        runtime.streamDestroy(stream)
    }

    // ---------------------------------------------------------------- validation and errors

    private fun checkTensor(t: Tensor, operation: String) {
        CollectiveChecks.device(t, device, operation)
        if (t.dtype == DType.BFloat16) {
            require(libraryVersion >= NcclVersion.AVG_AND_BFLOAT16) {
                "$operation: ${api.libraryName} ${NcclVersion.format(libraryVersion)} has no bfloat16 (needs 2.10 or later); use Float16/Float32 or upgrade"
            }
        }
    }

    private fun checkOp(op: ReduceOp, dtype: DType, operation: String): Int {
        CollectiveChecks.op(op, dtype, operation)
        val code = NcclRedOp.of(op)
        requireNotNull(code) {
            "$operation: $op is not supported by $backendName: ${api.libraryName} has no bitwise reductions; " +
                "use the mpi or local backend for bitwise ops, or Sum/Product/Min/Max/Avg"
        }
        if (op == ReduceOp.Avg) {
            require(libraryVersion >= NcclVersion.AVG_AND_BFLOAT16) {
                "$operation: Avg needs ${api.libraryName} 2.10 or later, this is ${NcclVersion.format(libraryVersion)}; use Sum and divide, or upgrade"
            }
        }
        return code
    }

    private fun ncclError(code: Int, call: String, op: Op): NcclException {
        val text = runCatching { api.getErrorString(code) }.getOrNull()
        val last = runCatching { api.getLastError(comm) }.getOrNull()?.takeIf { it.isNotBlank() }
        val message = "$call failed: ${NcclResult.name(code)} ($code)" + (text?.let { ": $it" } ?: "") + (last?.let { " — $it" } ?: "") +
            ". ${NcclResult.hint(code)}. The communicator was aborted."
        return NcclException(message, rank, backendName, op.name, op.entry.sequence, code, false, dumpWith(op, message))
    }

    private fun runtimeError(code: Int, call: String, op: Op): NcclException {
        val text = runCatching { runtime.getErrorString(code) }.getOrNull()
        val message = "${runtime.platformName} $call failed with error $code" + (text?.let { ": $it" } ?: "") + ". The communicator was aborted."
        return NcclException(message, rank, backendName, op.name, op.entry.sequence, code, true, dumpWith(op, message))
    }

    private fun timeoutError(op: Op): CommunicationTimeoutException {
        val message = "did not complete within ${config.timeout} (a rank never arrived, or the device is stuck); " +
            "the communicator was aborted with ncclCommAbort"
        return CommunicationTimeoutException(message, rank, backendName, op.name, op.entry.sequence, null, dumpWith(op, message))
    }

    /** Marks [op]'s record failed with [message] first, so the dump shows it. */
    private fun dumpWith(op: Op, message: String): String {
        op.entry.fail(RuntimeException(message))
        return recorder.dumpJson()
    }

    private fun abortedError(operation: String, sequence: Long, cause: CommunicationException): CommunicatorAbortedException =
        CommunicatorAbortedException(
            if (cause.operation == "close") "the communicator was closed; create a new one"
            else "the communicator was aborted by an earlier failure: ${cause.message}",
            rank, backendName, operation, sequence, cause, cause.flightRecorderDump ?: recorder.dumpJson(),
        )

    private fun dt(t: Tensor): Int = NcclDataType.of(t.dtype)

    private companion object {
        /** Point-to-point messages move bytes (`ncclUint8`), so any dtypes of equal byte size match. */
        const val BYTES = NcclDataType.UINT8
        val JSON = Json { encodeDefaults = true }

        fun longBytes(v: Long): ByteArray = ByteArray(8) { i -> (v ushr (8 * i)).toByte() }

        fun readLong(b: ByteArray, offset: Int): Long {
            var v = 0L
            for (i in 7 downTo 0) v = (v shl 8) or (b[offset + i].toLong() and 0xFF)
            return v
        }
        val CLEANER: Cleaner = Cleaner.create()

        val SIG_OPS = listOf("allReduce", "broadcast", "reduce", "allGather", "reduceScatter", "gather", "scatter", "allToAll", "barrier")
        val SIG_FIELDS = listOf("operation", "dtype", "op", "root", "dim", "shape", "shape")

        /** What every rank must agree on for one collective, as 7 longs (see [SIG_FIELDS]). */
        fun sig(operation: String, t: Tensor?, op: ReduceOp? = null, root: Int = -1, dim: Int = Int.MIN_VALUE): LongArray = longArrayOf(
            SIG_OPS.indexOf(operation).toLong(),
            t?.dtype?.ordinal?.toLong() ?: -1,
            op?.ordinal?.toLong() ?: -1,
            root.toLong(),
            if (dim == Int.MIN_VALUE || t == null) -1 else norm(t, dim).toLong(),
            t?.shape?.hashCode()?.toLong() ?: -1,
            t?.numel ?: -1,
        )

        fun describeSig(v: LongArray): String =
            "${SIG_OPS.getOrElse(v[0].toInt()) { "?" }}(dtype=${DType.entries.getOrNull(v[1].toInt()) ?: "-"}, " +
                "op=${ReduceOp.entries.getOrNull(v[2].toInt()) ?: "-"}, root=${v[3]}, dim=${v[4]}, elements=${v[6]})"

        fun norm(t: Tensor, dim: Int): Int = if (dim < 0) dim + t.ndim else dim

        fun outerCount(shape: List<Int>, d: Int): Long {
            var o = 1L
            for (i in 0 until d) o *= shape[i]
            return o
        }
    }

    /** Frees an output's device memory once its tensor is unreachable, on the native thread while it runs. */
    private class DeviceFree(val runtime: DeviceRuntime, val dispatcher: NativeDispatcher, val ptr: Long) : Runnable {
        override fun run() {
            if (dispatcher.isClosed) runtime.free(ptr) else dispatcher.dispatch(EmptyCoroutineContext, Runnable { runtime.free(ptr) })
        }
    }
}

internal fun deviceIndex(device: Device): Int = when (device) {
    is Device.Cuda -> device.index
    is Device.Rocm -> device.index
    Device.Host -> throw IllegalArgumentException("a GPU communicator needs a GPU device, got $device")
}
