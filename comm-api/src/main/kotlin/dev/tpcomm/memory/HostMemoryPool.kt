package dev.tpcomm.memory

import dev.tpcomm.NativeMemoryBudgetException
import java.lang.foreign.Arena
import java.util.concurrent.atomic.AtomicLong

/**
 * tpcomm's allocator of host tensor memory: what `Tensor.zeros`, `Tensor.of`, `Tensor.copy` and
 * the outputs tpcomm allocates take when no arena is given.
 *
 * - Requests up to [maxPooledBytes] are rounded up to a size class ([SizeClasses]) and served
 *   from slabs (long-lived shared arenas, one per slab of 64 KiB to 1 MiB) carved into equal blocks with a free list, so an
 *   allocation and its free are a few field updates under the class's monitor (no per-tensor
 *   arena, whose close would hand-shake with every thread).
 * - Larger requests get a shared arena of their own, closed when freed (as before the pool: the
 *   memset and page faults of a large tensor dwarf the arena's cost).
 * - **Budget.** Every slab and every large arena is counted against [budget] before it is
 *   allocated ([reserve]); reaching the budget first reclaims (idle slabs, then a garbage
 *   collection and the cleaners of unreachable tensors, with bounded retries, as
 *   `java.nio.Bits.reserveMemory` does for direct buffers) and only then fails with
 *   [NativeMemoryBudgetException]. Past 7/8 of the budget a collection starts in the background
 *   ([reclaimEarlyIfNearLimit]), so a loop that forgets its tensors rarely waits at the budget.
 *   Blocks carved from an existing slab are not counted again: the hot path touches no shared
 *   counter.
 * - Footprint: a slab goes back to the system when it is wholly free and the pool already keeps
 *   [retainBytes] of free slabs (or its class [classRetainBytes]), unless the pool is
 *   [underPressure] (then it is kept for the allocations to come); a wholly free slab that no
 *   allocation used for about [idleReleaseMillis] goes back too ([IdleSlabTrimmer]). Memory in use
 *   is what live tensors hold; tensors the program forgets come back when the garbage collector
 *   finds them, at the latest when the budget is reached.
 * - Blocks are 64-byte aligned; [allocate] with `zero = true` returns zeroed memory.
 * - Thread-safe; a block may be freed from any thread (the Cleaner's included).
 *
 * The caller (Tensor) guarantees a block is freed once, and only when nothing can touch it.
 * A segment kept past its tensor's close may see the block reused by another tensor: tensors
 * refuse access after close, raw segments cannot. `-Dtpcomm.memory.pool=false` gives every
 * tensor its own arena again (slower; a stale segment then fails with IllegalStateException),
 * to debug such a program.
 */
internal class HostMemoryPool(
    /** Bytes of wholly free slabs the pool keeps for reuse, all classes together. */
    @JvmField val retainBytes: Long = DEFAULT_RETAIN_BYTES,
    /** Bytes of wholly free slabs one size class keeps. */
    @JvmField val classRetainBytes: Long = DEFAULT_CLASS_RETAIN_BYTES,
    /** Largest request served from slabs; larger ones get an arena of their own. */
    @JvmField val maxPooledBytes: Long = SizeClasses.MAX_POOLED_BYTES,
    /** False: every request gets an arena of its own (the allocator before the pool). */
    @JvmField val enabled: Boolean = true,
    /** The native bytes this pool may hold. */
    @JvmField val budget: NativeMemoryBudget = NativeMemoryBudget(Long.MAX_VALUE, "unlimited"),
    /** A wholly free slab unused this long goes back to the system (0: never, only the retain limits apply). */
    @JvmField val idleReleaseMillis: Long = DEFAULT_IDLE_RELEASE_MILLIS,
) {
    init {
        require(maxPooledBytes in 0..SizeClasses.MAX_POOLED_BYTES) { "maxPooledBytes must be in 0..${SizeClasses.MAX_POOLED_BYTES}" }
    }

    /** Bytes of wholly free slabs currently kept. */
    @JvmField internal val emptyBytes = AtomicLong()

    /** Bytes of live large allocations (arenas of their own), for [budgetException]. */
    private val largeBytes = AtomicLong()

    private val classes = Array(SizeClasses.COUNT) { i ->
        val size = SizeClasses.blockSize(i)
        SizeClass(this, size, SizeClasses.blocksPerSlab(size))
    }

    /** Started on the first slab kept free; gives idle slabs back. */
    @JvmField internal val trimmer: IdleSlabTrimmer = IdleSlabTrimmer(this, idleReleaseMillis)

    /**
     * A block of [bytes] bytes, 64-byte aligned, zeroed when [zero] is true.
     *
     * @throws NativeMemoryBudgetException if the memory does not fit in [budget] even after reclaiming.
     */
    fun allocate(bytes: Long, zero: Boolean = true): HostBlock {
        require(bytes >= 0) { "cannot allocate $bytes bytes" }
        if (!enabled || bytes > maxPooledBytes) {
            reserve(bytes, null)
            val arena = Arena.ofShared()
            try {
                val block = ArenaBlock(arena.allocate(bytes, SizeClasses.ALIGNMENT), arena, this)
                largeBytes.addAndGet(bytes)
                return block
            } catch (e: Throwable) {
                arena.close()
                budget.release(bytes)
                throw e
            }
        }
        return classes[SizeClasses.indexOf(bytes)].allocate(bytes, zero)
    }

    /** Gives back what [allocate] counted for a large block of [bytes] (its arena is closed). */
    internal fun releaseLarge(bytes: Long) {
        largeBytes.addAndGet(-bytes)
        budget.release(bytes)
    }

    /**
     * Counts [bytes] against the budget. When they do not fit: the shared reclaim loop
     * ([NativeMemoryBudget.reclaim]) returns every wholly free slab to the system, runs `System.gc()`
     * so that the cleaners of unreachable tensors give their blocks back, and retries with sleeps of 1, 2, 4, ... ms ([MAX_SLEEPS] of them, a sleep after which
     * memory was freed not counted, up to [MAX_RECLAIM_NANOS] in all). Returns false, counting
     * nothing, as soon as [ready] says the caller no longer needs the bytes (a slab of its class
     * got a free block meanwhile). An interrupt does not stop the retries; it is restored after.
     *
     * @throws NativeMemoryBudgetException when the bytes still do not fit.
     * @throws IllegalArgumentException when the configured budget is not a size.
     */
    fun reserve(bytes: Long, ready: (() -> Boolean)?): Boolean {
        budget.configError?.let { throw IllegalArgumentException("tpcomm memory budget: $it") }
        if (budget.tryReserve(bytes)) {
            reclaimEarlyIfNearLimit()
            return true
        }
        if (bytes > budget.limit) throw budgetException(bytes)
        return NativeMemoryBudget.reclaim({ budget.tryReserve(bytes) }, { trimEmptySlabs(0) }, ::heldInUse, ready)
            ?: throw budgetException(bytes)
    }

    /** Armed: the next reservation past [earlyReclaimBytes] starts a background collection. */
    private val earlyReclaimArmed = java.util.concurrent.atomic.AtomicBoolean(true)

    /** Past this many bytes in use (7/8 of the budget), a garbage collection starts in the background. */
    private val earlyReclaimBytes: Long = budget.limit - budget.limit / 8

    /** Below this (3/4 of the budget) the early collection is armed again; above it the pool is under pressure. */
    private val rearmBytes: Long = budget.limit - budget.limit / 4

    /**
     * True while the budget counts more than 3/4 of its limit: a slab that becomes wholly free is
     * then kept whatever [retainBytes] says (memory is in demand, and giving it back would only make
     * the next allocation map it again); the [IdleSlabTrimmer] and the budget's reclaim still free it.
     */
    fun underPressure(): Boolean = budget.limit != Long.MAX_VALUE && budget.reserved() > rearmBytes

    /**
     * Past 7/8 of the budget in use (slabs counted minus wholly free ones), runs `System.gc()` once
     * on a short-lived daemon thread, so that the cleaners of forgotten tensors give their memory
     * back before an allocation reaches the budget and has to wait for them. Armed again once the
     * bytes in use fell below 3/4 of the budget (checked by that thread for up to a second after its
     * collection, and by later reservations): a program whose live tensors hold more than that gets
     * no collection from here (the one at the budget still runs). Called once per counted slab, not
     * per tensor.
     */
    private fun reclaimEarlyIfNearLimit() {
        if (budget.limit == Long.MAX_VALUE) return
        val inUse = heldInUse()
        if (inUse > earlyReclaimBytes) {
            if (earlyReclaimArmed.get() && earlyReclaimArmed.compareAndSet(true, false)) {
                Thread.ofPlatform().daemon(true).name("tpcomm-memory-reclaim").start {
                    System.gc()
                    for (i in 0 until 50) {
                        if (heldInUse() < rearmBytes) {
                            earlyReclaimArmed.set(true)
                            break
                        }
                        try {
                            Thread.sleep(20)
                        } catch (_: InterruptedException) {
                            break
                        }
                    }
                }
            }
        } else if (inUse < rearmBytes && !earlyReclaimArmed.get()) {
            earlyReclaimArmed.set(true)
        }
    }

    /** Bytes held for live blocks: counted minus wholly free slabs kept. */
    private fun heldInUse(): Long = budget.reserved() - emptyBytes.get()

    /**
     * Gives back wholly free slabs of every class: those idle for at least [idleTicks] ticks of the
     * trimmer (0: all of them now). Returns the bytes given back.
     */
    fun trimEmptySlabs(idleTicks: Int): Long = classes.sumOf { it.trimEmpty(idleTicks) }

    /** The exception for a request of [bytes] that does not fit: the budget, what holds it, the fixes. */
    private fun budgetException(bytes: Long): NativeMemoryBudgetException {
        val f = HostMemoryBudgetSettings::formatBytes
        val held = budget.reserved()
        val byClass = classes.filter { it.slabCount() > 0 }
            .sortedByDescending { it.slabCount() * it.slabBytes }
        val parts = byClass.take(MAX_CLASSES_LISTED).map { c ->
            val inUse = c.blocksInUse()
            "${f(c.blockSize)} blocks: $inUse in use (${f(inUse * c.blockSize)}) in ${c.slabCount()} slabs (${f(c.slabCount() * c.slabBytes)})"
        }.toMutableList()
        if (byClass.size > MAX_CLASSES_LISTED) {
            val rest = byClass.drop(MAX_CLASSES_LISTED).sumOf { it.slabCount() * it.slabBytes }
            parts += "${byClass.size - MAX_CLASSES_LISTED} smaller classes: ${f(rest)}"
        }
        val large = largeBytes.get()
        if (large > 0) parts += "tensors over ${f(maxPooledBytes)} (an arena each): ${f(large)}"
        val message = "tpcomm's native host memory budget of ${f(budget.limit)} (from ${budget.source}) is exhausted: " +
            "${f(held)} is held and an allocation needs ${f(bytes)} more, even after a garbage collection reclaimed the " +
            "tensors nobody could reach. Held by live tensors, by size class: " +
            (if (parts.isEmpty()) "nothing pooled" else parts.joinToString("; ")) + ". " +
            "Fixes: close the tensors you no longer need (tensor.close(), or use { }), so their memory is reused at once; " +
            "or raise the budget with -D${HostMemoryBudgetSettings.PROPERTY}=<size> or the environment variable " +
            "${HostMemoryBudgetSettings.ENV}=<size> (for example ${NativeMemoryBudget.suggestedBudget(held + bytes)})."
        return NativeMemoryBudgetException(message, budget.limit, held, bytes)
    }

    /** The size class serving [bytes] (for tests). */
    fun sizeClassOf(bytes: Long): SizeClass = classes[SizeClasses.indexOf(bytes)]

    /** Pooled blocks handed out and not given back, all classes together. */
    fun blocksInUse(): Long = classes.sumOf { it.blocksInUse() }

    /** Bytes of slabs the pool holds, in use or kept free. */
    fun slabBytes(): Long = classes.sumOf { it.slabCount() * it.slabBytes }

    companion object {
        const val DEFAULT_RETAIN_BYTES: Long = 64L shl 20
        const val DEFAULT_CLASS_RETAIN_BYTES: Long = 16L shl 20
        const val DEFAULT_IDLE_RELEASE_MILLIS: Long = 5_000
        const val SLAB_ALIGNMENT: Long = 4096

        /** The reclaim loop's sleeps ([NativeMemoryBudget.reclaim], shared with the device budgets). */
        const val MAX_SLEEPS: Int = NativeMemoryBudget.MAX_SLEEPS

        /** Longest a reservation keeps reclaiming ([NativeMemoryBudget.reclaim]). */
        const val MAX_RECLAIM_NANOS: Long = NativeMemoryBudget.MAX_RECLAIM_NANOS

        private const val MAX_CLASSES_LISTED = 6

        /**
         * The pool every tensor uses. `-Dtpcomm.memory.pool=false` turns pooling off,
         * `-Dtpcomm.memory.retainBytes=N` sets [retainBytes], `-Dtpcomm.memory.classRetainBytes=N`
         * sets [classRetainBytes], `-Dtpcomm.memory.idleReleaseMillis=N`
         * sets [idleReleaseMillis]; the budget comes from [HostMemoryBudgetSettings].
         */
        @JvmField
        val DEFAULT: HostMemoryPool = HostMemoryPool(
            retainBytes = System.getProperty("tpcomm.memory.retainBytes")?.toLongOrNull()?.coerceAtLeast(0) ?: DEFAULT_RETAIN_BYTES,
            classRetainBytes = System.getProperty("tpcomm.memory.classRetainBytes")?.toLongOrNull()?.coerceAtLeast(0)
                ?: DEFAULT_CLASS_RETAIN_BYTES,
            enabled = System.getProperty("tpcomm.memory.pool")?.lowercase() != "false",
            budget = NativeMemoryBudget.fromEnvironment(),
            idleReleaseMillis = System.getProperty("tpcomm.memory.idleReleaseMillis")?.toLongOrNull()?.coerceAtLeast(0)
                ?: DEFAULT_IDLE_RELEASE_MILLIS,
        )
    }
}
