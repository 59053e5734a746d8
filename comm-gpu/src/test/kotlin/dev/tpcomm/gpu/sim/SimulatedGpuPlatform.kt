@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.gpu.sim

import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.DeviceRuntime
import dev.tpcomm.gpu.NcclApi
import dev.tpcomm.gpu.NcclCommConfig
import dev.tpcomm.gpu.NcclCommunicator
import dev.tpcomm.gpu.NcclConnector
import dev.tpcomm.gpu.NcclDataType
import dev.tpcomm.gpu.NcclRedOp
import dev.tpcomm.gpu.NcclResult
import dev.tpcomm.gpu.NcclVersion
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.lang.ref.Cleaner
import java.security.SecureRandom
import java.util.TreeMap
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.CountDownLatch
import java.util.concurrent.LinkedBlockingQueue
import java.util.concurrent.TimeUnit
import java.util.concurrent.atomic.AtomicInteger
import java.util.concurrent.atomic.AtomicLong

/**
 * **A testing aid**: an in-process stand-in for NCCL and a GPU runtime, so the engine
 * ([dev.tpcomm.gpu.NcclCommunicator]) and anything built on it runs on machines without a GPU.
 * It is not a GPU backend and moves no data to any device.
 *
 * - [runtime] keeps "device" memory in host segments behind fake device addresses (above
 *   `0x7E00_0000_0000_0000`, never a real host address); each stream is a thread that runs its work
 *   in order; an event completes only when the work recorded before it has run.
 * - [api] implements NCCL's semantics over those streams for every rank of every world created
 *   through it: non-blocking init that completes when all ranks joined, collectives that meet their
 *   peers' by sequence number and exchange data (reading all inputs before any output is written,
 *   so in-place calls are exact), buffered point-to-point, group calls, split, abort (peers then
 *   see `ncclRemoteError`), and `ncclInvalidUsage` as an asynchronous error on mismatched calls.
 *
 * One platform is shared by all ranks of a world (they live in one JVM); ranks must use distinct
 * devices, as with NCCL. Differences from real NCCL: sends are buffered (a send completes without a
 * matching receive), reductions run on the stream's thread in element order, `ncclGetLastError`
 * describes simulated faults only. Fault injection: [injectAsyncError], [stall].
 *
 * Thread-safe. [close] stops every stream thread.
 */
public class SimulatedGpuPlatform @JvmOverloads constructor(
    /** Number of simulated devices. */
    public val deviceCount: Int = 8,
    /** The version [NcclApi.getVersion] reports (default 2.30.7). */
    public val version: Int = 23007,
    /** The name [NcclApi.libraryName] reports. */
    public val libraryName: String = "NCCL (simulated)",
    /**
     * As NCCL, refuse (`ncclInvalidUsage`) two ranks of one communicator on the same device. False lets
     * every rank of a world use device 0, for harnesses that cannot tell which rank a tensor is for.
     */
    public val rejectSharedDevices: Boolean = true,
    /**
     * When true, a rank's `ncclCommAbort`/`ncclCommDestroy` makes its peers' pending and later calls
     * fail with `ncclRemoteError`, as NCCL's network transports report a closed connection. When false
     * (default, as intra-node transports behave) peers wait until their own deadline.
     */
    public val detectPeerFailure: Boolean = false,
) : AutoCloseable {
    private val handles = ConcurrentHashMap<Long, Any>()
    private val nextHandle = AtomicLong(0x1000)
    private val memoryLock = Any()
    private val allocations = TreeMap<Long, Allocation>()
    private var nextAddress = DEVICE_BASE
    private val currentDevice = ThreadLocal.withInitial { 0 }
    private val cliques = ConcurrentHashMap<String, Clique>()
    private val stalled = ConcurrentHashMap.newKeySet<Int>()
    private val groupOps = ThreadLocal.withInitial { ArrayList<PendingKernel>() }
    private val groupDepth = ThreadLocal.withInitial { 0 }

    /** The simulated NCCL. */
    public val api: NcclApi = SimApi()

    /** The simulated GPU runtime. */
    public val runtime: DeviceRuntime = SimRuntime()

    /** Number of live simulated allocations (for leak checks in tests). */
    public val liveAllocations: Int get() = synchronized(memoryLock) { allocations.size }

    /** Sets asynchronous error [code] on every live communicator on [device] (as a failed kernel or network would). */
    public fun injectAsyncError(device: Int, code: Int) {
        handles.values.filterIsInstance<SimComm>().filter { it.device == device }.forEach { it.state.set(code); it.lastError = "injected error ${NcclResult.name(code)}" }
    }

    /** While [stalled] is true, collective and point-to-point kernels on [device] do not start (a hung GPU); aborting the communicator releases them. */
    public fun stall(device: Int, stalled: Boolean) {
        if (stalled) this.stalled += device else this.stalled -= device
    }

    /** A new device tensor on [device] holding a copy of [host]'s bytes (synchronous; for tests and tools). */
    public fun upload(host: Tensor, device: Device): Tensor {
        val bytes = host.byteSize
        val address = allocate(bytes, indexOf(device))
        MemorySegment.copy(host.segment, 0, resolve(address, bytes), 0, bytes)
        val t = Tensor.wrapDevice(device, address, host.dtype, *host.shape.toIntArray())
        CLEANER.register(t, Freer(this, address))
        return t
    }

    /** A new host tensor holding a copy of device tensor [tensor]'s bytes (synchronous; the caller makes sure its writes completed). */
    public fun download(tensor: Tensor): Tensor {
        if (!tensor.device.isGpu) return tensor
        val out = Tensor.zeros(tensor.dtype, tensor.shape)
        MemorySegment.copy(resolve(tensor.address, tensor.byteSize), 0, out.segment, 0, tensor.byteSize)
        return out
    }

    override fun close() {
        handles.values.filterIsInstance<SimStream>().forEach { it.stop() }
        handles.clear()
    }

    // ------------------------------------------------------------------ memory

    private class Allocation(val base: Long, val bytes: Long, val device: Int, val arena: Arena, val segment: MemorySegment)

    private class Freer(val platform: SimulatedGpuPlatform, val address: Long) : Runnable {
        override fun run() { platform.release(address) }
    }

    private fun allocate(bytes: Long, device: Int): Long = synchronized(memoryLock) {
        val arena = Arena.ofShared()
        val size = bytes.coerceAtLeast(1)
        val seg = arena.allocate(size, 256)
        val base = nextAddress
        nextAddress += (size + 255) / 256 * 256 + 256
        allocations[base] = Allocation(base, size, device, arena, seg)
        base
    }

    private fun release(address: Long): Boolean {
        val a = synchronized(memoryLock) { allocations.remove(address) } ?: return false
        a.arena.close()
        return true
    }

    private fun isDevice(address: Long): Boolean = address >= DEVICE_BASE

    /** The host memory behind [address] (device or host), [bytes] long; throws [SimFault] for an invalid device range. */
    private fun resolve(address: Long, bytes: Long): MemorySegment {
        if (!isDevice(address)) {
            if (address == 0L) throw SimFault(NcclResult.INVALID_ARGUMENT, CUDA_INVALID_VALUE, "NULL pointer")
            return MemorySegment.ofAddress(address).reinterpret(bytes)
        }
        val a = synchronized(memoryLock) { allocations.floorEntry(address)?.value }
        if (a == null || address + bytes > a.base + a.bytes) {
            throw SimFault(NcclResult.INVALID_ARGUMENT, CUDA_INVALID_VALUE, "device range 0x${address.toString(16)}+$bytes is not allocated")
        }
        return a.segment.asSlice(address - a.base, bytes)
    }

    private fun checkDeviceBuffer(address: Long, bytes: Long) {
        if (bytes == 0L) return
        if (!isDevice(address)) throw SimFault(NcclResult.INVALID_ARGUMENT, CUDA_INVALID_VALUE, "0x${address.toString(16)} is not a device pointer")
        resolve(address, bytes)
    }

    private fun indexOf(device: Device): Int = when (device) {
        is Device.Cuda -> device.index
        is Device.Rocm -> device.index
        Device.Host -> throw IllegalArgumentException("upload needs a GPU device")
    }

    private class SimFault(val nccl: Int, val cuda: Int, message: String) : RuntimeException(message)

    // ------------------------------------------------------------------ streams and events

    private inner class SimStream(val device: Int) {
        private val queue = LinkedBlockingQueue<() -> Unit>()
        @Volatile var error = 0
        @Volatile private var running = true
        private val thread = Thread.ofPlatform().daemon(true).name("sim-gpu$device-stream").start {
            while (running) {
                val task = try { queue.take() } catch (_: InterruptedException) { break }
                try {
                    task()
                } catch (f: SimFault) {
                    if (error == 0) error = f.cuda
                } catch (_: InterruptedException) {
                    break
                } catch (t: Throwable) {
                    if (error == 0) error = CUDA_LAUNCH_FAILURE
                }
            }
        }

        fun enqueue(task: () -> Unit) { queue.add(task) }

        fun stop() { running = false; thread.interrupt() }
    }

    private class SimEvent { @Volatile var done: CountDownLatch? = null; @Volatile var stream: SimStream? = null }

    private fun handle(obj: Any): Long = nextHandle.addAndGet(16).also { handles[it] = obj }

    private inline fun <reified T> lookup(h: Long): T? = handles[h] as? T

    // ------------------------------------------------------------------ communicators

    private inner class Clique(val size: Int) {
        val members = arrayOfNulls<SimComm>(size)
        val joined = AtomicInteger()
        val rounds = ConcurrentHashMap<Long, Round>()
        val splits = ConcurrentHashMap<Long, SplitRound>()
        val mailboxes = ConcurrentHashMap<Long, LinkedBlockingQueue<ByteArray>>()
        @Volatile var broken = 0

        fun mailbox(src: Int, dst: Int) = mailboxes.computeIfAbsent(src.toLong() * 1_000_003 + dst) { LinkedBlockingQueue() }
    }

    private inner class SimComm(val device: Int, val blocking: Boolean) {
        @Volatile lateinit var clique: Clique
        @Volatile var rank = 0
        val state = AtomicInteger(NcclResult.IN_PROGRESS)
        @Volatile var aborted = false
        @Volatile var lastError: String? = null
        var collectives = 0L
        var splitCount = 0L
    }

    private class Contribution(val kind: String, val send: Long, val recv: Long, val count: Long, val dtype: Int, val op: Int, val root: Int)

    private class Round(size: Int) {
        val inputs = arrayOfNulls<Contribution>(size)
        val arrived = CountDownLatch(size)
        val computed = CountDownLatch(size)
        val finished = AtomicInteger()
    }

    private class SplitRound(size: Int) {
        val colors = IntArray(size)
        val keys = IntArray(size)
        val children = arrayOfNulls<Any>(size)
        val arrived = AtomicInteger()
    }

    private class PendingKernel(val stream: SimStream, val isSend: Boolean, val body: () -> Unit)

    private class Abandon : RuntimeException(null, null, false, false)

    /** Waits for [latch]; gives up (and records the error) when the communicator is aborted or a peer failed. */
    private fun awaitPeers(latch: CountDownLatch, comm: SimComm) {
        while (!latch.await(1, TimeUnit.MILLISECONDS)) {
            if (latch.count == 0L) return
            checkAlive(comm)
        }
    }

    private fun checkAlive(comm: SimComm) {
        if (comm.aborted) throw Abandon()
        val broken = comm.clique.broken
        if (broken != 0) {
            comm.state.compareAndSet(NcclResult.SUCCESS, broken)
            comm.lastError = "a peer aborted its communicator"
            throw Abandon()
        }
    }

    private fun runKernel(comm: SimComm, body: () -> Unit) {
        try {
            while (comm.device in stalled) {
                checkAlive(comm)
                Thread.sleep(1)
            }
            checkAlive(comm)
            body()
        } catch (_: Abandon) {
        } catch (f: SimFault) {
            comm.state.compareAndSet(NcclResult.SUCCESS, f.nccl)
            comm.lastError = f.message
        }
    }

    private fun launchCollective(comm: SimComm, stream: SimStream, c: Contribution) {
        val seq = comm.collectives++
        val kernel = {
            runKernel(comm) {
                val clique = comm.clique
                val round = clique.rounds.computeIfAbsent(seq) { Round(clique.size) }
                round.inputs[comm.rank] = c
                round.arrived.countDown()
                awaitPeers(round.arrived, comm)
                val write = try {
                    compute(round, comm.rank, clique.size)
                } catch (f: SimFault) {
                    round.computed.countDown()
                    throw f
                }
                round.computed.countDown()
                awaitPeers(round.computed, comm)
                write()
                if (round.finished.incrementAndGet() == clique.size) clique.rounds.remove(seq)
            }
        }
        enqueueOrGroup(PendingKernel(stream, false, kernel))
    }

    private fun enqueueOrGroup(k: PendingKernel) {
        if (groupDepth.get() > 0) groupOps.get() += k else k.stream.enqueue(k.body)
    }

    /** Reads every input of [round] and returns the write of rank [me]'s output. */
    private fun compute(round: Round, me: Int, size: Int): () -> Unit {
        val inputs = round.inputs.map { it!! }
        val mine = inputs[me]
        val bad = inputs.indices.filter { r ->
            val o = inputs[r]
            o.kind != mine.kind || o.count != mine.count || o.dtype != mine.dtype || o.op != mine.op || o.root != mine.root
        }
        if (bad.isNotEmpty()) {
            throw SimFault(
                NcclResult.INVALID_USAGE, CUDA_LAUNCH_FAILURE,
                "simulated NCCL: ranks $bad called ${bad.map { inputs[it].kind }} with other arguments than rank $me's ${mine.kind}",
            )
        }
        val width = elementSize(mine.dtype)
        val n = mine.count
        return when (mine.kind) {
            "allReduce" -> {
                val result = reduce(inputs.map { resolve(it.send, n * width) }, mine.dtype, mine.op, n, size)
                ({ MemorySegment.copy(result, 0, resolve(mine.recv, n * width), 0, n * width) })
            }
            "broadcast" -> {
                val result = copyOf(resolve(inputs[mine.root].send, n * width))
                ({ MemorySegment.copy(result, 0, resolve(mine.recv, n * width), 0, n * width) })
            }
            "reduce" -> {
                if (me != mine.root) ({}) else {
                    val result = reduce(inputs.map { resolve(it.send, n * width) }, mine.dtype, mine.op, n, size)
                    ({ MemorySegment.copy(result, 0, resolve(mine.recv, n * width), 0, n * width) })
                }
            }
            "allGather" -> {
                val parts = inputs.map { copyOf(resolve(it.send, n * width)) }
                ({
                    val out = resolve(mine.recv, n * width * size)
                    for (r in 0 until size) MemorySegment.copy(parts[r], 0, out, r * n * width, n * width)
                })
            }
            "reduceScatter" -> {
                val result = reduce(inputs.map { resolve(it.send, n * width * size).asSlice(me * n * width, n * width) }, mine.dtype, mine.op, n, size)
                ({ MemorySegment.copy(result, 0, resolve(mine.recv, n * width), 0, n * width) })
            }
            else -> throw SimFault(NcclResult.INTERNAL_ERROR, CUDA_LAUNCH_FAILURE, "unknown kind ${mine.kind}")
        }
    }

    private fun copyOf(s: MemorySegment): MemorySegment = Arena.ofAuto().allocate(s.byteSize().coerceAtLeast(1)).also { MemorySegment.copy(s, 0, it, 0, s.byteSize()) }

    private fun reduce(inputs: List<MemorySegment>, dtype: Int, op: Int, n: Long, size: Int): MemorySegment {
        val dt = NcclDataType.toDType(dtype) ?: throw SimFault(NcclResult.INVALID_ARGUMENT, CUDA_INVALID_VALUE, "unsupported datatype $dtype")
        val out = Arena.ofAuto().allocate((n * dt.byteSize).coerceAtLeast(1))
        val src = inputs.map { Tensor.wrap(it, dt, n.toInt()) }
        val dst = Tensor.wrap(out.asSlice(0, n * dt.byteSize), dt, n.toInt())
        for (i in 0 until n) {
            if (dt.isFloatingPoint) {
                if (dt == DType.Float64) {
                    var acc = src[0].getDouble(i)
                    for (r in 1 until size) acc = combine(acc, src[r].getDouble(i), op)
                    dst.setDouble(i, if (op == NcclRedOp.AVG) acc / size else acc)
                } else {
                    var acc = src[0].getFloat(i)
                    for (r in 1 until size) acc = combine(acc.toDouble(), src[r].getFloat(i).toDouble(), op).toFloat()
                    dst.setFloat(i, if (op == NcclRedOp.AVG) acc / size else acc)
                }
            } else {
                var acc = src[0].getLong(i)
                for (r in 1 until size) acc = combineLong(acc, src[r].getLong(i), op, dt)
                if (op == NcclRedOp.AVG) acc = wrap(acc, dt) / size
                dst.setLong(i, acc)
            }
        }
        return out
    }

    private fun combine(a: Double, b: Double, op: Int): Double = when (op) {
        NcclRedOp.SUM, NcclRedOp.AVG -> a + b
        NcclRedOp.PROD -> a * b
        NcclRedOp.MAX -> if (a.isNaN() || b.isNaN()) Double.NaN else maxOf(a, b)
        NcclRedOp.MIN -> if (a.isNaN() || b.isNaN()) Double.NaN else minOf(a, b)
        else -> throw SimFault(NcclResult.INVALID_ARGUMENT, CUDA_INVALID_VALUE, "unsupported op $op")
    }

    private fun combineLong(a: Long, b: Long, op: Int, dt: DType): Long = when (op) {
        NcclRedOp.SUM, NcclRedOp.AVG -> a + b
        NcclRedOp.PROD -> a * b
        NcclRedOp.MAX -> if (dt == DType.UInt8) maxOf(a and 0xFF, b and 0xFF) else maxOf(wrap(a, dt), wrap(b, dt))
        NcclRedOp.MIN -> if (dt == DType.UInt8) minOf(a and 0xFF, b and 0xFF) else minOf(wrap(a, dt), wrap(b, dt))
        else -> throw SimFault(NcclResult.INVALID_ARGUMENT, CUDA_INVALID_VALUE, "unsupported op $op")
    }

    private fun wrap(v: Long, dt: DType): Long = when (dt) {
        DType.Int8 -> v.toByte().toLong()
        DType.UInt8 -> v and 0xFF
        DType.Int32 -> v.toInt().toLong()
        else -> v
    }

    private fun elementSize(dtype: Int): Long = when (dtype) {
        NcclDataType.UINT32 -> 4L
        NcclDataType.UINT64 -> 8L
        else -> (NcclDataType.toDType(dtype) ?: throw SimFault(NcclResult.INVALID_ARGUMENT, CUDA_INVALID_VALUE, "datatype $dtype")).byteSize.toLong()
    }

    // ------------------------------------------------------------------ NCCL

    private inner class SimApi : NcclApi {
        override val libraryName: String get() = this@SimulatedGpuPlatform.libraryName

        override fun getVersion(version: IntArray): Int { version[0] = this@SimulatedGpuPlatform.version; return NcclResult.SUCCESS }

        override fun getUniqueId(uniqueId: ByteArray): Int {
            if (uniqueId.size != NcclConnector.UNIQUE_ID_BYTES) return NcclResult.INVALID_ARGUMENT
            RANDOM.nextBytes(uniqueId)
            return NcclResult.SUCCESS
        }

        override fun commInitRankConfig(comm: LongArray, nranks: Int, uniqueId: ByteArray, rank: Int, config: NcclCommConfig): Int {
            if (nranks < 1 || rank !in 0 until nranks || uniqueId.size != NcclConnector.UNIQUE_ID_BYTES) return NcclResult.INVALID_ARGUMENT
            val key = uniqueId.joinToString("") { "%02x".format(it) }
            val clique = cliques.computeIfAbsent(key) { Clique(nranks) }
            val c = SimComm(currentDevice.get(), config.blocking)
            synchronized(clique) {
                if (clique.size != nranks) return NcclResult.INVALID_ARGUMENT
                if (clique.members[rank] != null) return NcclResult.INVALID_USAGE
                if (rejectSharedDevices && clique.members.any { it != null && it.device == c.device }) return NcclResult.INVALID_USAGE // NCCL: duplicate GPU
                c.clique = clique
                c.rank = rank
                clique.members[rank] = c
            }
            comm[0] = handle(c)
            if (clique.joined.incrementAndGet() == nranks) {
                cliques.remove(key)
                clique.members.forEach { it!!.state.compareAndSet(NcclResult.IN_PROGRESS, NcclResult.SUCCESS) }
            }
            if (!config.blocking) return if (c.state.get() == NcclResult.SUCCESS) NcclResult.SUCCESS else NcclResult.IN_PROGRESS
            while (c.state.get() == NcclResult.IN_PROGRESS) Thread.sleep(1)
            return c.state.get()
        }

        override fun commSplit(comm: Long, color: Int, key: Int, newComm: LongArray, config: NcclCommConfig?): Int {
            val parent = lookup<SimComm>(comm) ?: return NcclResult.INVALID_ARGUMENT
            if (parent.state.get() != NcclResult.SUCCESS) return NcclResult.INVALID_USAGE
            val clique = parent.clique
            val round = clique.splits.computeIfAbsent(parent.splitCount++) { SplitRound(clique.size) }
            val child = if (color == NcclVersion.SPLIT_NOCOLOR) null else SimComm(parent.device, config?.blocking ?: parent.blocking)
            newComm[0] = child?.let { handle(it) } ?: 0L
            round.colors[parent.rank] = color
            round.keys[parent.rank] = key
            round.children[parent.rank] = child
            if (round.arrived.incrementAndGet() == clique.size) {
                clique.splits.entries.removeIf { it.value === round }
                val groups = (0 until clique.size).filter { round.colors[it] != NcclVersion.SPLIT_NOCOLOR }.groupBy { round.colors[it] }
                for ((_, ranks) in groups) {
                    val ordered = ranks.sortedWith(compareBy({ round.keys[it] }, { it }))
                    val sub = Clique(ordered.size)
                    ordered.forEachIndexed { i, r ->
                        val ch = round.children[r] as SimComm
                        ch.clique = sub
                        ch.rank = i
                        sub.members[i] = ch
                    }
                    sub.joined.set(ordered.size)
                    sub.members.forEach { it!!.state.set(NcclResult.SUCCESS) }
                }
            }
            if (child == null) return NcclResult.SUCCESS
            if (!child.blocking) return if (child.state.get() == NcclResult.SUCCESS) NcclResult.SUCCESS else NcclResult.IN_PROGRESS
            while (child.state.get() == NcclResult.IN_PROGRESS) { if (clique.broken != 0) return clique.broken; Thread.sleep(1) }
            return child.state.get()
        }

        override fun commAbort(comm: Long): Int {
            val c = handles.remove(comm) as? SimComm ?: return NcclResult.INVALID_ARGUMENT
            c.aborted = true
            if (detectPeerFailure) runCatching { c.clique.broken = NcclResult.REMOTE_ERROR }
            return NcclResult.SUCCESS
        }

        override fun commDestroy(comm: Long): Int {
            val c = handles.remove(comm) as? SimComm ?: return NcclResult.INVALID_ARGUMENT
            c.aborted = true
            if (detectPeerFailure) runCatching { c.clique.broken = NcclResult.REMOTE_ERROR }
            return NcclResult.SUCCESS
        }

        override fun commGetAsyncError(comm: Long, asyncError: IntArray): Int {
            val c = lookup<SimComm>(comm) ?: return NcclResult.INVALID_ARGUMENT
            asyncError[0] = c.state.get()
            return NcclResult.SUCCESS
        }

        override fun commCount(comm: Long, count: IntArray): Int {
            val c = lookup<SimComm>(comm) ?: return NcclResult.INVALID_ARGUMENT
            count[0] = c.clique.size
            return NcclResult.SUCCESS
        }

        override fun commUserRank(comm: Long, rank: IntArray): Int {
            val c = lookup<SimComm>(comm) ?: return NcclResult.INVALID_ARGUMENT
            rank[0] = c.rank
            return NcclResult.SUCCESS
        }

        private fun collective(comm: Long, stream: Long, c: Contribution, sendBytes: Long, recvBytes: Long): Int {
            val sc = lookup<SimComm>(comm) ?: return NcclResult.INVALID_ARGUMENT
            val st = lookup<SimStream>(stream) ?: return NcclResult.INVALID_ARGUMENT
            if (sc.state.get() != NcclResult.SUCCESS) return NcclResult.INVALID_USAGE
            if (NcclDataType.toDType(c.dtype) == null || c.op !in NcclRedOp.SUM..NcclRedOp.AVG) return NcclResult.INVALID_ARGUMENT
            try {
                checkDeviceBuffer(c.send, sendBytes)
                checkDeviceBuffer(c.recv, recvBytes)
            } catch (f: SimFault) {
                sc.lastError = f.message
                return f.nccl
            }
            launchCollective(sc, st, c)
            return NcclResult.SUCCESS
        }

        private fun size(dt: Int): Long = NcclDataType.toDType(dt)?.byteSize?.toLong() ?: 1L

        private fun nranks(comm: Long): Long = (lookup<SimComm>(comm)?.clique?.size ?: 1).toLong()

        override fun allReduce(sendBuf: Long, recvBuf: Long, count: Long, datatype: Int, op: Int, comm: Long, stream: Long): Int =
            collective(comm, stream, Contribution("allReduce", sendBuf, recvBuf, count, datatype, op, 0), count * size(datatype), count * size(datatype))

        override fun broadcast(sendBuf: Long, recvBuf: Long, count: Long, datatype: Int, root: Int, comm: Long, stream: Long): Int =
            collective(comm, stream, Contribution("broadcast", sendBuf, recvBuf, count, datatype, 0, root), count * size(datatype), count * size(datatype))

        override fun reduce(sendBuf: Long, recvBuf: Long, count: Long, datatype: Int, op: Int, root: Int, comm: Long, stream: Long): Int =
            collective(comm, stream, Contribution("reduce", sendBuf, recvBuf, count, datatype, op, root), count * size(datatype), count * size(datatype))

        override fun allGather(sendBuf: Long, recvBuf: Long, sendCount: Long, datatype: Int, comm: Long, stream: Long): Int =
            collective(comm, stream, Contribution("allGather", sendBuf, recvBuf, sendCount, datatype, 0, 0), sendCount * size(datatype), sendCount * size(datatype) * nranks(comm))

        override fun reduceScatter(sendBuf: Long, recvBuf: Long, recvCount: Long, datatype: Int, op: Int, comm: Long, stream: Long): Int =
            collective(comm, stream, Contribution("reduceScatter", sendBuf, recvBuf, recvCount, datatype, op, 0), recvCount * size(datatype) * nranks(comm), recvCount * size(datatype))

        override fun send(sendBuf: Long, count: Long, datatype: Int, peer: Int, comm: Long, stream: Long): Int {
            val sc = lookup<SimComm>(comm) ?: return NcclResult.INVALID_ARGUMENT
            val st = lookup<SimStream>(stream) ?: return NcclResult.INVALID_ARGUMENT
            if (peer !in 0 until sc.clique.size) return NcclResult.INVALID_ARGUMENT
            val bytes = count * size(datatype)
            try { checkDeviceBuffer(sendBuf, bytes) } catch (f: SimFault) { sc.lastError = f.message; return f.nccl }
            enqueueOrGroup(PendingKernel(st, true) {
                runKernel(sc) { sc.clique.mailbox(sc.rank, peer).add(resolve(sendBuf, bytes).toArray(ValueLayout.JAVA_BYTE)) }
            })
            return NcclResult.SUCCESS
        }

        override fun recv(recvBuf: Long, count: Long, datatype: Int, peer: Int, comm: Long, stream: Long): Int {
            val sc = lookup<SimComm>(comm) ?: return NcclResult.INVALID_ARGUMENT
            val st = lookup<SimStream>(stream) ?: return NcclResult.INVALID_ARGUMENT
            if (peer !in 0 until sc.clique.size) return NcclResult.INVALID_ARGUMENT
            val bytes = count * size(datatype)
            try { checkDeviceBuffer(recvBuf, bytes) } catch (f: SimFault) { sc.lastError = f.message; return f.nccl }
            enqueueOrGroup(PendingKernel(st, false) {
                runKernel(sc) {
                    val box = sc.clique.mailbox(peer, sc.rank)
                    var msg: ByteArray? = null
                    while (msg == null) {
                        msg = box.poll(1, TimeUnit.MILLISECONDS)
                        if (msg == null) checkAlive(sc)
                    }
                    if (msg.size.toLong() != bytes) {
                        throw SimFault(NcclResult.INVALID_USAGE, CUDA_LAUNCH_FAILURE, "simulated NCCL: rank $peer sent ${msg.size} bytes, rank ${sc.rank} receives $bytes")
                    }
                    MemorySegment.copy(MemorySegment.ofArray(msg), 0, resolve(recvBuf, bytes), 0, bytes)
                }
            })
            return NcclResult.SUCCESS
        }

        override fun groupStart(): Int {
            groupDepth.set(groupDepth.get() + 1)
            return NcclResult.SUCCESS
        }

        override fun groupEnd(): Int {
            val depth = groupDepth.get()
            if (depth == 0) return NcclResult.INVALID_USAGE
            groupDepth.set(depth - 1)
            if (depth > 1) return NcclResult.SUCCESS
            val ops = ArrayList(groupOps.get())
            groupOps.get().clear()
            // One fused kernel per stream: sends first (they are buffered), then receives and collectives in order.
            for ((stream, kernels) in ops.groupBy { it.stream }) {
                val ordered = kernels.filter { it.isSend } + kernels.filter { !it.isSend }
                stream.enqueue { ordered.forEach { it.body() } }
            }
            return NcclResult.SUCCESS
        }

        override fun getErrorString(result: Int): String = "simulated ${NcclResult.name(result)}"

        override fun getLastError(comm: Long): String? = lookup<SimComm>(comm)?.lastError
    }

    // ------------------------------------------------------------------ runtime

    private inner class SimRuntime : DeviceRuntime {
        override val platformName: String get() = "simulated GPU runtime"

        override fun getDeviceCount(count: IntArray): Int { count[0] = deviceCount; return 0 }

        override fun setDevice(device: Int): Int {
            if (device !in 0 until deviceCount) return CUDA_INVALID_DEVICE
            currentDevice.set(device)
            return 0
        }

        override fun streamCreateNonBlocking(stream: LongArray): Int { stream[0] = handle(SimStream(currentDevice.get())); return 0 }

        override fun streamDestroy(stream: Long): Int {
            val s = handles.remove(stream) as? SimStream ?: return CUDA_INVALID_HANDLE
            s.enqueue { s.stop() }
            return 0
        }

        override fun eventCreateDisableTiming(event: LongArray): Int { event[0] = handle(SimEvent()); return 0 }

        override fun eventDestroy(event: Long): Int = if (handles.remove(event) is SimEvent) 0 else CUDA_INVALID_HANDLE

        override fun eventRecord(event: Long, stream: Long): Int {
            val e = lookup<SimEvent>(event) ?: return CUDA_INVALID_HANDLE
            val s = lookup<SimStream>(stream) ?: return CUDA_INVALID_HANDLE
            val latch = CountDownLatch(1)
            e.done = latch
            e.stream = s
            s.enqueue { latch.countDown() }
            return 0
        }

        override fun eventQuery(event: Long): Int {
            val e = lookup<SimEvent>(event) ?: return CUDA_INVALID_HANDLE
            e.stream?.error?.let { if (it != 0) return it }
            val d = e.done ?: return 0
            return if (d.count == 0L) 0 else DeviceRuntime.ERROR_NOT_READY
        }

        override fun eventSynchronize(event: Long): Int {
            val e = lookup<SimEvent>(event) ?: return CUDA_INVALID_HANDLE
            e.done?.await()
            return e.stream?.error ?: 0
        }

        override fun streamWaitEvent(stream: Long, event: Long): Int {
            val e = lookup<SimEvent>(event) ?: return CUDA_INVALID_HANDLE
            val s = lookup<SimStream>(stream) ?: return CUDA_INVALID_HANDLE
            val latch = e.done ?: return 0
            s.enqueue { latch.await() }
            return 0
        }

        override fun malloc(ptr: LongArray, bytes: Long): Int {
            if (bytes < 0) return CUDA_INVALID_VALUE
            ptr[0] = allocate(bytes, currentDevice.get())
            return 0
        }

        override fun free(ptr: Long): Int {
            if (ptr == 0L) return 0
            return if (release(ptr)) 0 else CUDA_INVALID_VALUE
        }

        override fun memcpyAsync(dst: Long, src: Long, bytes: Long, kind: Int, stream: Long): Int {
            val s = lookup<SimStream>(stream) ?: return CUDA_INVALID_HANDLE
            try { resolve(dst, bytes); resolve(src, bytes) } catch (f: SimFault) { return f.cuda }
            s.enqueue { MemorySegment.copy(resolve(src, bytes), 0, resolve(dst, bytes), 0, bytes) }
            return 0
        }

        override fun memcpy2DAsync(dst: Long, dstPitch: Long, src: Long, srcPitch: Long, width: Long, height: Long, kind: Int, stream: Long): Int {
            val s = lookup<SimStream>(stream) ?: return CUDA_INVALID_HANDLE
            if (width > dstPitch || width > srcPitch) return CUDA_INVALID_VALUE
            if (height == 0L || width == 0L) return 0
            val dstSpan = (height - 1) * dstPitch + width
            val srcSpan = (height - 1) * srcPitch + width
            try { resolve(dst, dstSpan); resolve(src, srcSpan) } catch (f: SimFault) { return f.cuda }
            s.enqueue {
                val d = resolve(dst, dstSpan)
                val from = resolve(src, srcSpan)
                for (row in 0 until height) MemorySegment.copy(from, row * srcPitch, d, row * dstPitch, width)
            }
            return 0
        }

        override fun getErrorString(error: Int): String = when (error) {
            CUDA_INVALID_VALUE -> "invalid argument (simulated)"
            CUDA_INVALID_DEVICE -> "invalid device ordinal (simulated)"
            CUDA_INVALID_HANDLE -> "invalid resource handle (simulated)"
            CUDA_LAUNCH_FAILURE -> "unspecified launch failure (simulated)"
            DeviceRuntime.ERROR_NOT_READY -> "device not ready (simulated)"
            else -> "error $error (simulated)"
        }
    }

    private companion object {
        const val DEVICE_BASE = 0x7E00_0000_0000_0000L
        // CUDA driver_types.h (CUDA 13.3, as the preset's cudart constants): cudaErrorInvalidValue 1,
        // cudaErrorInvalidDevice 101, cudaErrorInvalidResourceHandle 400, cudaErrorLaunchFailure 719.
        const val CUDA_INVALID_VALUE = 1
        const val CUDA_INVALID_DEVICE = 101
        const val CUDA_INVALID_HANDLE = 400
        const val CUDA_LAUNCH_FAILURE = 719
        val RANDOM = SecureRandom()
        val CLEANER: Cleaner = Cleaner.create()
    }
}
