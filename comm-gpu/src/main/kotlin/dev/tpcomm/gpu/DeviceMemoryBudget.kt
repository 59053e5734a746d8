package dev.tpcomm.gpu

import dev.tpcomm.NativeMemoryBudgetException
import dev.tpcomm.memory.NativeMemoryBudget
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.atomic.AtomicLong

/**
 * The device memory budget of one device's native thread: every output the engine allocates for a
 * collective (`cudaMallocAsync`/`hipMallocAsync`, [allocate]) is counted against it, and given back
 * when its free is issued ([DeviceFree], at `Tensor.close()` or from the Cleaner).
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
 * Role: one per [DeviceThread]. Thread-safety: [queueFree] from any thread; [allocate] and
 * [drainFrees] on the native thread only.
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

    /** Bytes counted (outputs allocated and not yet freed), 0 before the first allocation. */
    fun reservedBytes(): Long = resolved?.reserved() ?: 0L

    /**
     * On the native thread, device current: [bytes] of device memory on [stream] into [ptr]. Returns
     * the runtime's code of a failure that is not exhaustion (the caller names it).
     *
     * @throws NativeMemoryBudgetException when the bytes do not fit in the budget or on the device, even after reclaiming.
     * @throws IllegalArgumentException when the configured budget is not a size.
     */
    fun allocate(ptr: LongArray, bytes: Long, stream: Long): Int {
        val b = budget()
        b.configError?.let { throw IllegalArgumentException("tpcomm device memory budget: $it") }
        var code = DeviceRuntime.SUCCESS
        var deviceFull = false
        val attempt = {
            if (!b.tryReserve(bytes)) {
                false
            } else {
                code = runtime.mallocAsync(ptr, bytes, stream)
                if (code == DeviceRuntime.SUCCESS) {
                    true
                } else {
                    b.release(bytes)
                    deviceFull = code == DeviceRuntime.ERROR_MEMORY_ALLOCATION
                    false
                }
            }
        }
        val stop = { code != DeviceRuntime.SUCCESS && code != DeviceRuntime.ERROR_MEMORY_ALLOCATION }
        val done = attempt() || !stop() && bytes <= b.limit &&
            NativeMemoryBudget.reclaim(attempt, ::drainFrees, { b.reserved() - pendingBytes.get() }, stop) == true
        if (done) {
            liveOutputs.incrementAndGet()
            return DeviceRuntime.SUCCESS
        }
        if (stop()) return code
        throw exception(b, bytes, deviceFull)
    }

    /** An output's memory (of [bytes]) was freed (its free issued) or handed back unused. */
    fun released(bytes: Long) {
        liveOutputs.decrementAndGet()
        resolved?.release(bytes)
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

    /** On the native thread: issues every free handed over so far. */
    fun drainFrees() {
        while (true) {
            val f = pending.poll() ?: return
            pendingBytes.addAndGet(-f.bytes)
            f.freeOnThread()
        }
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
