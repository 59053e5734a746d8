package dev.tpcomm.memory

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
 * - Footprint: a slab goes back to the system when it is wholly free and the pool already keeps
 *   [retainBytes] of free slabs (or its class [classRetainBytes]). Memory in use is what live
 *   tensors hold; tensors the program forgets come back when the garbage collector finds them.
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
) {
    init {
        require(maxPooledBytes in 0..SizeClasses.MAX_POOLED_BYTES) { "maxPooledBytes must be in 0..${SizeClasses.MAX_POOLED_BYTES}" }
    }

    /** Bytes of wholly free slabs currently kept. */
    @JvmField internal val emptyBytes = AtomicLong()

    private val classes = Array(SizeClasses.COUNT) { i ->
        val size = SizeClasses.blockSize(i)
        SizeClass(this, size, SizeClasses.blocksPerSlab(size))
    }

    /** A block of [bytes] bytes, 64-byte aligned, zeroed when [zero] is true. */
    fun allocate(bytes: Long, zero: Boolean = true): HostBlock {
        require(bytes >= 0) { "cannot allocate $bytes bytes" }
        if (!enabled || bytes > maxPooledBytes) {
            val arena = Arena.ofShared()
            try {
                return ArenaBlock(arena.allocate(bytes, SizeClasses.ALIGNMENT), arena)
            } catch (e: Throwable) {
                arena.close()
                throw e
            }
        }
        return classes[SizeClasses.indexOf(bytes)].allocate(bytes, zero)
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
        const val SLAB_ALIGNMENT: Long = 4096

        /** The pool every tensor uses; `-Dtpcomm.memory.pool=false` turns pooling off, `-Dtpcomm.memory.retainBytes=N` sets [retainBytes]. */
        @JvmField
        val DEFAULT: HostMemoryPool = HostMemoryPool(
            retainBytes = System.getProperty("tpcomm.memory.retainBytes")?.toLongOrNull()?.coerceAtLeast(0) ?: DEFAULT_RETAIN_BYTES,
            enabled = System.getProperty("tpcomm.memory.pool")?.lowercase() != "false",
        )
    }
}
