package dev.tpcomm.gpu

import dev.tpcomm.NativeMemoryBudgetException
import dev.tpcomm.memory.NativeMemoryBudget
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.atomic.AtomicLong

/**
 * The device memory budget of one device's native thread: every output block the engine allocates
 * for a collective ([allocate]: from the device's [DeviceOutputPool], else `cudaMallocAsync` /
 * `hipMallocAsync`) is counted against it while it is in use or cached by the pool, and given back
 * when the pool frees the block (the budget's pressure, the stream's retirement, the thread's end).
 *
 * The host budget's rules ([NativeMemoryBudget.reclaim], docs/memory.md): an allocation that does
 * not fit first reclaims what the program forgot (`System.gc()`, so that the Cleaner hands this
 * device the frees of unreachable outputs, which the native thread issues while it waits, with
 * bounded retries) and only then fails with [NativeMemoryBudgetException], naming the budget, what
 * holds it and the fixes; nothing is allocated and no library call fails. The same applies when the
 * device itself is full below the budget (the runtime's `cudaErrorMemoryAllocation`): PyTorch's
 * caching allocator likewise frees its cached blocks and retries once `cudaMalloc` fails
 * (pytorch/pytorch `c10/cuda/CUDACachingAllocator.cpp`, header comment).
 *
 * The limit is resolved at the first allocation, on the native thread with the device current
 * ([DeviceMemoryBudgetSettings]): by default [DeviceMemoryBudgetSettings.DEFAULT_PERCENT] % of the
 * memory `cudaMemGetInfo` reports free then.
 *
 * Role: one per [DeviceThread], owning its [DeviceOutputPool]. Thread-safety: [queueFree] and
 * [releasedAfterEnd] from any thread; [allocate], [recycle], [retire], [end] and [drainFrees] on the
 * native thread only.
 */
internal class DeviceMemoryBudget(private val runtime: DeviceRuntime, private val device: Int, private val thread: DeviceThread) {
    @Volatile private var resolved: NativeMemoryBudget? = null

    /** Frees handed over by [queueFree], issued by [drainFrees] on the native thread. */
    private val pending = ConcurrentLinkedQueue<DeviceFree>()
    private val pendingBytes = AtomicLong()
    private val liveOutputs = AtomicLong()
    private val drain = Runnable { drainFrees() }

    /** The budget (resolved at the first allocation; native thread for the first call). */
    fun budget(): NativeMemoryBudget = resolved ?: DeviceMemoryBudgetSettings.fromEnvironment(runtime).also { resolved = it }

    /** Bytes counted (outputs in use and blocks the pool caches), 0 before the first allocation. */
    fun reservedBytes(): Long = resolved?.reserved() ?: 0L

    /** The cache of output blocks freed on each stream: outputs of repeating sizes reuse them ([DeviceOutputPool]). */
    private val pool = DeviceOutputPool(runtime)

    /**
     * On the native thread, device current: a block for an output of [bytes] on [stream] into [ptr],
     * [DeviceOutputPool.blockSize] bytes counted: a block cached for [stream] when one of that size is
     * ([DeviceOutputPool.take], no runtime call), else `mallocAsync`. When the bytes do not fit the
     * budget or the device, the pool's idle blocks are freed first, then forgotten outputs reclaimed.
     * Returns the runtime's code of a failure that is not exhaustion (the caller names it).
     *
     * @throws NativeMemoryBudgetException when the bytes do not fit in the budget or on the device, even after reclaiming.
     * @throws IllegalArgumentException when the configured budget is not a size.
     */
    fun allocate(ptr: LongArray, bytes: Long, stream: Long): Int {
        val b = budget()
        b.configError?.let { throw IllegalArgumentException("tpcomm device memory budget: $it") }
        thread.reapRetiredStreams()
        val size = DeviceOutputPool.blockSize(bytes)
        var code = DeviceRuntime.SUCCESS
        var deviceFull = false
        val attempt = attempt@{
            val cached = pool.take(stream, size)
            if (cached != 0L) {
                ptr[0] = cached
                code = DeviceRuntime.SUCCESS
                return@attempt true
            }
            if (!b.tryReserve(size) && !(releaseIdle(b) && b.tryReserve(size))) return@attempt false
            code = runtime.mallocAsync(ptr, size, stream)
            // The device is full below the budget: the cached blocks go back to the runtime first (freed on
            // their streams; this stream's frees are reusable by its allocation at once).
            if (code == DeviceRuntime.ERROR_MEMORY_ALLOCATION && releaseIdle(b)) code = runtime.mallocAsync(ptr, size, stream)
            if (code == DeviceRuntime.SUCCESS) {
                pool.allocated(stream)
                true
            } else {
                b.release(size)
                deviceFull = code == DeviceRuntime.ERROR_MEMORY_ALLOCATION
                false
            }
        }
        val stop = { code != DeviceRuntime.SUCCESS && code != DeviceRuntime.ERROR_MEMORY_ALLOCATION }
        val done = attempt() || !stop() && size <= b.limit &&
            NativeMemoryBudget.reclaim(attempt, ::drainFrees, { b.reserved() - pendingBytes.get() }, stop) == true
        if (done) {
            liveOutputs.incrementAndGet()
            return DeviceRuntime.SUCCESS
        }
        if (stop()) return code
        throw exception(b, size, deviceFull)
    }

    /** Frees the pool's idle blocks and gives their bytes back to [b]; true when there were any. */
    private fun releaseIdle(b: NativeMemoryBudget): Boolean {
        if (pool.cachedBytes == 0L) return false
        b.release(pool.releaseIdle())
        return true
    }

    /**
     * On the native thread: an output's block of [size] bytes, its free already ordered on [stream]
     * after its last use ([DeviceFree.freeOnThread]) or never handed to a caller, goes back to the pool
     * (still counted), or to the runtime when [stream] retired (then no longer counted).
     */
    fun recycle(ptr: Long, size: Long, stream: Long) {
        liveOutputs.decrementAndGet()
        val freed = pool.give(ptr, size, stream, thread::streamUnused)
        if (freed > 0) resolved?.release(freed)
    }

    /** After the native thread ended: an output of [size] bytes was freed by its [DeviceFree] directly. */
    fun releasedAfterEnd(size: Long) {
        liveOutputs.decrementAndGet()
        resolved?.release(size)
    }

    /**
     * On the native thread: [stream]'s communicator closed. Its cached blocks are freed now; the
     * device's thread is told ([DeviceThread.streamUnused]) once no output of it is alive.
     */
    fun retire(stream: Long) {
        val freed = pool.retire(stream, thread::streamUnused)
        if (freed > 0) resolved?.release(freed)
    }

    /**
     * On the native thread, as it ends: frees every cached block; returns the retired streams that
     * still have live outputs (their frees, after the thread, go to the consumer stream: [DeviceFree]).
     */
    fun end(): List<Long> {
        resolved?.release(pool.releaseIdle())
        return pool.retiredInUse()
    }

    /**
     * Hands [free] to the native thread, which issues it at its next turn or while an allocation
     * waits at the budget; false when the thread ended (the caller frees another way).
     */
    fun queueFree(free: DeviceFree): Boolean {
        pending.add(free)
        pendingBytes.addAndGet(free.bytes)
        if (thread.runOnThread(drain)) return true
        if (!pending.remove(free)) return true // a drain took it before the thread ended
        pendingBytes.addAndGet(-free.bytes)
        return false
    }

    /** On the native thread: issues every free handed over so far, then destroys the retired streams whose work is done. */
    fun drainFrees() {
        while (true) {
            val f = pending.poll() ?: break
            pendingBytes.addAndGet(-f.bytes)
            f.freeOnThread()
        }
        thread.reapRetiredStreams()
    }

    private fun exception(b: NativeMemoryBudget, bytes: Long, deviceFull: Boolean): NativeMemoryBudgetException {
        val f = NativeMemoryBudget::formatBytes
        val held = b.reserved()
        val what = "${f(held)} is held by ${liveOutputs.get()} outputs of collectives that allocate (allGather, reduceScatter, gather, allToAll " +
            "and their uneven variants) not yet closed"
        val why = if (deviceFull) {
            "tpcomm could not allocate ${f(bytes)} of device memory on ${runtime.platformName} device $device: the device itself is full " +
                "(${runtime.platformName} returned error ${DeviceRuntime.ERROR_MEMORY_ALLOCATION}, out of memory) while tpcomm's device memory budget " +
                "of ${f(b.limit)} (from ${b.source}) still had room, so other users of the GPU (another library's allocator, another process) hold the rest; $what"
        } else {
            "tpcomm's device memory budget of ${f(b.limit)} on ${runtime.platformName} device $device (from ${b.source}) is exhausted: $what, " +
                "and an allocation needs ${f(bytes)} more"
        }
        val message = "$why, even after a garbage collection reclaimed the outputs nobody could reach. Fixes: close the output tensors you " +
            "no longer need (tensor.close(), or use { }): their device memory is freed at once, ordered after the work queued on them; or " +
            (if (deviceFull) "free device memory elsewhere, or lower the budget so that this failure comes earlier and names tpcomm's share, with " else "raise the budget with ") +
            "-D${DeviceMemoryBudgetSettings.PROPERTY}=<size or percent of the free memory> or the environment variable " +
            "${DeviceMemoryBudgetSettings.ENV}=<size or percent> (for example ${NativeMemoryBudget.suggestedBudget(held + bytes)} or 95%)."
        return NativeMemoryBudgetException(message, b.limit, held, bytes)
    }
}

/**
 * Where a device's memory budget ([DeviceMemoryBudget]) comes from, in this order: the system
 * property `tpcomm.memory.deviceBudget` ([PROPERTY]), the environment variable
 * `TPCOMM_MEMORY_DEVICE_BUDGET` ([ENV]), else [DEFAULT_PERCENT] % of the device's free memory at the
 * first allocation (`cudaMemGetInfo` / `hipMemGetInfo`). A value is a size as the host budget takes
 * it (`8g`, `512m`, `unlimited`) or a percentage of the free memory (`80%`); the same limit applies
 * to every device of the process. Stateless, thread-safe.
 */
internal object DeviceMemoryBudgetSettings {
    const val PROPERTY: String = "tpcomm.memory.deviceBudget"
    const val ENV: String = "TPCOMM_MEMORY_DEVICE_BUDGET"

    /** The default share of the device's free memory: the rest stays for NCCL's growth, the user's kernels and other libraries. */
    const val DEFAULT_PERCENT: Int = 90

    /** The budget from explicit inputs: the settings' values and the device's free memory (null when the runtime cannot tell). */
    fun resolve(property: String?, env: String?, freeBytes: Long?): NativeMemoryBudget {
        for ((value, name) in listOf(property to "-D$PROPERTY", env to ENV)) {
            if (value.isNullOrBlank()) continue
            val v = value.trim()
            if (v.endsWith("%")) {
                val percent = v.dropLast(1).trim().toDoubleOrNull()?.takeIf { it > 0 && it <= 100 }
                    ?: return NativeMemoryBudget(Long.MAX_VALUE, "$name=$value", "$name='$value' is not a percentage in (0, 100]")
                return ofFree(freeBytes, percent, "$name=$value")
            }
            val bytes = NativeMemoryBudget.parseSize(v)
                ?: return NativeMemoryBudget(
                    Long.MAX_VALUE, "$name=$value",
                    "$name='$value' is not a memory size; use bytes or a number with k, m, g or t (for example 8g), a percentage of the free memory (80%), or unlimited",
                )
            return NativeMemoryBudget(bytes, "$name=$value")
        }
        return ofFree(freeBytes, DEFAULT_PERCENT.toDouble(), "$DEFAULT_PERCENT% of the device's free memory at its first allocation")
    }

    private fun ofFree(freeBytes: Long?, percent: Double, source: String): NativeMemoryBudget {
        if (freeBytes == null) return NativeMemoryBudget(Long.MAX_VALUE, "$source, but the runtime did not report the free memory: unlimited")
        return NativeMemoryBudget((freeBytes * (percent / 100.0)).toLong().coerceAtLeast(1), "$source, ${NativeMemoryBudget.formatBytes(freeBytes)} free")
    }

    /** The budget of the calling thread's current device, from this JVM's settings and `memGetInfo`. */
    fun fromEnvironment(runtime: DeviceRuntime): NativeMemoryBudget {
        val property = System.getProperty(PROPERTY)
        val env = System.getenv(ENV)
        val explicitSize = listOf(property, env).firstOrNull { !it.isNullOrBlank() }?.trim()?.endsWith("%") == false
        val free = if (explicitSize) null else freeMemory(runtime)
        return resolve(property, env, free)
    }

    /** `memGetInfo`'s free bytes, or null when the runtime cannot tell (not supported, or a test double with no answer). */
    private fun freeMemory(runtime: DeviceRuntime): Long? = try {
        val free = LongArray(1)
        val total = LongArray(1)
        if (runtime.memGetInfo(free, total) == DeviceRuntime.SUCCESS) free[0] else null
    } catch (_: RuntimeException) {
        null
    }
}
