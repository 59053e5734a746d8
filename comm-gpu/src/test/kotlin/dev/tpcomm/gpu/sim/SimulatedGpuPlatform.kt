@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.gpu.sim

import dev.tpcomm.Device
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.DeviceRuntime
import dev.tpcomm.gpu.NcclApi
import dev.tpcomm.gpu.NcclResult
import java.lang.foreign.MemorySegment
import java.lang.ref.Cleaner
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.CopyOnWriteArrayList
import java.util.concurrent.atomic.AtomicInteger
import java.util.concurrent.atomic.AtomicLong

/**
 * **A test fixture** (comm-gpu's test-jar): an in-process stand-in for NCCL and a GPU runtime that
 * behaves like the real libraries where the engine's correctness depends on it, so the engine
 * ([dev.tpcomm.gpu.NcclCommunicator]) runs on machines without a GPU. It moves no data to any device.
 *
 * Three parts: [SimulatedMemory] (device and pinned host memory), [SimulatedRuntime] (CUDA/HIP:
 * per-thread current device, streams, events, blocking pageable copies and frees) and
 * [SimulatedNccl] (NCCL: non-blocking init/split/collectives/groups finished on background threads,
 * point-to-point that progresses only in concurrently progressing groups beyond a bounded buffer,
 * finalize/destroy/abort rules). Each class's KDoc cites the library source it follows.
 *
 * What the real libraries would do silently (corrupt, hang later, open a context on GPU 0) is
 * recorded: [misuse] (tests fail on it through [assertNoMisuse]) and [implicitDeviceCalls].
 * Fault injection: [injectAsyncError], [stall]. Thread-safe; [close] stops every stream thread.
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
    /** Bytes a send may leave in the peer's connection buffer without a matching receive progressing (NCCL_BUFFSIZE's default, 4 MiB). */
    public val p2pBufferBytes: Long = 4L shl 20,
    /**
     * The process environment the simulated library reads, as NCCL reads `NCCL_*` variables with
     * `ncclGetEnv` (NVIDIA/nccl `src/misc/param.cc`): `NCCL_COMM_BLOCKING` overrides every
     * communicator's `blocking` field (`src/init.cc`, `envConfigOverride`), `NCCL_MULTI_RANK_GPU_ENABLE=1`
     * accepts two ranks of one communicator on one device (`src/init.cc`, `initTransportsRank`).
     */
    public val environment: Map<String, String> = emptyMap(),
    /** What [NcclApi.float8IsOcp] reports: true as NCCL, false to stand in for RCCL (FNUZ FP8 types). */
    public val float8IsOcp: Boolean = true,
    /**
     * Bytes of memory of each simulated device (80 GiB by default, an H100's): `cudaMalloc` and
     * `cudaMallocAsync` past it return `cudaErrorMemoryAllocation` (2), as the real runtime does when
     * the device's memory is exhausted. Test fixtures' [upload]s count but are never refused.
     */
    public val deviceMemoryBytes: Long = DEFAULT_DEVICE_MEMORY_BYTES,
    /** Per-device overrides of [deviceMemoryBytes] (device index to bytes). */
    public val deviceMemory: Map<Int, Long> = emptyMap(),
) : AutoCloseable {
    internal val handles = ConcurrentHashMap<Long, Any>()
    private val nextHandle = AtomicLong(0x1000)
    internal val memory = SimulatedMemory({ d -> deviceMemory[d] ?: deviceMemoryBytes }) { recordMisuse(it) }
    /** Handles freed by the library (a destroyed stream or event, an aborted or destroyed communicator), with the call that freed them. */
    private val freedHandles = ConcurrentHashMap<Long, String>()
    internal val stalled: MutableSet<Int> = ConcurrentHashMap.newKeySet()
    internal val simRuntime = SimulatedRuntime(this)
    private val simNccl = SimulatedNccl(this)
    private val misuseLog = CopyOnWriteArrayList<String>()
    private val implicitLog = CopyOnWriteArrayList<String>()
    internal val pageableCopies = AtomicInteger()

    /** The simulated NCCL. */
    public val api: NcclApi get() = simNccl

    /** The simulated GPU runtime. */
    public val runtime: DeviceRuntime get() = simRuntime

    /** Number of live simulated device allocations (for leak checks in tests). */
    public val liveAllocations: Int get() = memory.liveDeviceAllocations

    /** `cudaMallocAsync` calls made so far, successful or not (how often the engine went to the runtime's allocator). */
    public val mallocAsyncCalls: Long get() = simRuntime.mallocAsyncCalls.get()

    /** Streams made by `cudaStreamCreateWithFlags` and not destroyed yet (legacy default streams not counted). */
    public val liveStreams: Int get() = handles.values.count { it is SimulatedRuntime.SimStream }

    /** [liveStreams] of [device] only. */
    public fun liveStreams(device: Int): Int = handles.values.count { it is SimulatedRuntime.SimStream && it.device == device }

    /**
     * Waits until every stream of [device] (its legacy default stream included) has run all the work
     * queued on it so far, so that every event recorded on them completed: what a test waits for before
     * it asserts on what the engine does once a stream's work is done. Throws [IllegalStateException]
     * after [timeoutMillis] (a held or stalled stream never gets idle).
     */
    @JvmOverloads
    public fun awaitStreamsIdle(device: Int, timeoutMillis: Long = 10_000) {
        val deadline = System.nanoTime() + timeoutMillis * 1_000_000
        while (true) {
            val busy = simRuntime.streams.filter { it.device == device && it.pending.get() > 0 }
            if (busy.isEmpty()) return
            check(System.nanoTime() < deadline) { "${busy.size} streams of simulated device $device still have work queued after $timeoutMillis ms" }
            Thread.sleep(1)
        }
    }

    /** Names of the threads that called `cudaFreeHost` (it synchronises the device: never the device's shared native thread). */
    public val pinnedFreeThreads: List<String> get() = pinnedFreeLog.toList()

    internal val pinnedFreeLog = CopyOnWriteArrayList<String>()

    /** Bytes of live device allocations on simulated device [device]. */
    public fun deviceBytesInUse(device: Int): Long = memory.usedBytes(device)

    /** Number of live page-locked host allocations. */
    public val livePinnedAllocations: Int get() = memory.livePinnedAllocations

    /** Copies that blocked their caller because one side was pageable host memory. */
    public val blockingPageableCopies: Int get() = pageableCopies.get()

    /** Uses of the libraries that real NCCL/CUDA would turn into corruption, a hang or undefined behaviour. */
    public val misuse: List<String> get() = misuseLog.toList()

    /** PreMulSum operators (`ncclRedOpCreatePreMulSum`) of live communicators not destroyed yet: 0 when none leaked. */
    public val liveRedOps: Int get() = simNccl.liveRedOps

    /** Runtime calls made on a thread with no current device (they acted on device 0, opening a context there). */
    public val implicitDeviceCalls: List<String> get() = implicitLog.toList()

    /** Throws [AssertionError] listing [misuse] when there is any. */
    public fun assertNoMisuse() {
        if (misuseLog.isNotEmpty()) throw AssertionError("the simulated platform recorded misuse:\n" + misuseLog.joinToString("\n") { " - $it" })
    }

    internal fun recordMisuse(what: String) { misuseLog += what }

    internal fun recordImplicitDevice(what: String) { implicitLog += what }

    internal fun handle(obj: Any): Long = nextHandle.addAndGet(16).also { handles[it] = obj }

    /** The object behind handle [h]; a handle the library already freed is recorded as a use after free (a crash or corruption on a real GPU). */
    internal inline fun <reified T> lookup(h: Long): T? {
        val o = handles[h]
        if (o == null) noteFreedHandle(h)
        return o as? T
    }

    /** Removes handle [h] (freed by [call]); a later use of it is recorded. */
    internal inline fun <reified T> remove(h: Long, call: String): T? {
        val o = handles[h] as? T
        if (o == null) {
            noteFreedHandle(h)
            return null
        }
        handles.remove(h)
        freedHandles[h] = call
        return o
    }

    internal fun noteFreedHandle(h: Long) {
        freedHandles[h]?.let { call ->
            recordMisuse("handle 0x${h.toString(16)} used after $call freed it (on a real library: a use after free) on thread '${Thread.currentThread().name}'")
        }
    }

    /** True when NCCL would accept two ranks of one communicator on one device (`NCCL_MULTI_RANK_GPU_ENABLE=1`, or [rejectSharedDevices] false). */
    internal val multiRankGpu: Boolean get() = !rejectSharedDevices || environment["NCCL_MULTI_RANK_GPU_ENABLE"] == "1"

    /** `NCCL_COMM_BLOCKING` as NCCL's `envConfigOverride` applies it: 0 or 1 overrides the config, anything else does not. */
    internal fun blockingOverride(requested: Boolean): Boolean =
        // As NCCL reads it: the environment, then NCCL_CONF_FILE or $HOME/.nccl.conf, then /etc/nccl.conf,
        // parsed with strtoll(.., 0) (src/misc/param.cc initEnvFunc, ncclLoadParam; src/init.cc envConfigOverride).
        when (dev.tpcomm.gpu.NcclEnvRead.integer(dev.tpcomm.gpu.NcclEnvRead.value("NCCL_COMM_BLOCKING", environment::get))) {
            0L -> false
            1L -> true
            else -> requested
        }

    /**
     * Milliseconds each simulated `ncclCommGetAsyncError` takes (0: none): a slow call, so that a test
     * can show an `ncclCommAbort` from another thread racing it (N12a, recorded as [misuse]).
     */
    @Volatile
    public var slowAsyncErrorPollMillis: Long = 0L

    /** Sets asynchronous error [code] on every live communicator on [device] (as a failed kernel or network would). */
    public fun injectAsyncError(device: Int, code: Int) {
        simNccl.liveComms.filter { it.device == device }.forEach { it.state.set(code); it.lastError = "injected error ${NcclResult.name(code)}" }
    }

    /** While [stalled] is true, collective and point-to-point kernels on [device] do not start (a hung GPU); aborting the communicator releases them. */
    public fun stall(device: Int, stalled: Boolean) {
        if (stalled) this.stalled += device else this.stalled -= device
    }

    /**
     * Blocks simulated stream [stream] (a runtime stream handle; 0 is [device]'s legacy default
     * stream) until the returned handle is closed, as a long-running kernel would: work queued behind it waits.
     */
    @JvmOverloads
    public fun holdStream(stream: Long, device: Int = 0): AutoCloseable {
        val s = (if (stream == 0L) simRuntime.legacyStream(device) else lookup<SimulatedRuntime.SimStream>(stream))
            ?: throw IllegalArgumentException("no simulated stream $stream on device $device")
        val gate = java.util.concurrent.CountDownLatch(1)
        s.enqueue { gate.await() }
        return AutoCloseable { gate.countDown() }
    }

    /** A new device tensor on [device] holding a copy of [host]'s bytes (synchronous; for tests and tools). */
    public fun upload(host: Tensor, device: Device): Tensor {
        val bytes = host.byteSize
        val address = memory.allocate(bytes, indexOf(device))
        MemorySegment.copy(host.segment, 0, memory.resolve(address, bytes), 0, bytes)
        val t = Tensor.wrapDevice(device, address, host.dtype, *host.shape.toIntArray())
        CLEANER.register(t, Freer(memory, address))
        return t
    }

    /** A new host tensor holding a copy of device tensor [tensor]'s bytes (synchronous; the caller makes sure its writes completed). */
    public fun download(tensor: Tensor): Tensor {
        if (!tensor.device.isGpu) return tensor
        val out = Tensor.zeros(tensor.dtype, tensor.shape)
        MemorySegment.copy(memory.resolve(tensor.address, tensor.byteSize), 0, out.segment, 0, tensor.byteSize)
        return out
    }

    override fun close() {
        simRuntime.streams.forEach { it.stop() }
        handles.clear()
    }

    private class Freer(val memory: SimulatedMemory, val address: Long) : Runnable {
        override fun run() { memory.release(address) }
    }

    private fun indexOf(device: Device): Int = when (device) {
        is Device.Cuda -> device.index
        is Device.Rocm -> device.index
        Device.Host -> throw IllegalArgumentException("upload needs a GPU device")
    }

    public companion object {
        /** [deviceMemoryBytes]' default: 80 GiB. */
        public const val DEFAULT_DEVICE_MEMORY_BYTES: Long = 80L shl 30
        private val CLEANER: Cleaner = Cleaner.create()
    }
}
