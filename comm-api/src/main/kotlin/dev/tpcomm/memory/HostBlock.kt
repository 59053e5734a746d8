package dev.tpcomm.memory

import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment

/**
 * One allocation of host memory handed to a tensor: [segment] plus how to give it back.
 *
 * [run] gives the memory back; the tensor calls it through its `Cleaner.Cleanable` (explicitly on
 * the last close/release, or from the Cleaner thread once the tensor is unreachable), which runs
 * it at most once. A block never references the tensor that holds it, so registering it with a
 * Cleaner does not keep the tensor reachable.
 */
internal sealed class HostBlock(
    /** The memory: exactly the requested number of bytes, 64-byte aligned. */
    @JvmField val segment: MemorySegment,
) : Runnable

/** A block carved from a pooled [Slab]; [run] puts it back on its slab's free list. */
internal class SlabBlock(segment: MemorySegment, private val slab: Slab, private val index: Int) : HostBlock(segment) {
    override fun run() = slab.sizeClass.free(slab, index)
}

/** A large allocation with an arena of its own; [run] closes the arena (the memory is freed) and gives its bytes back to [pool]'s budget. */
internal class ArenaBlock(segment: MemorySegment, private val arena: Arena, private val pool: HostMemoryPool) : HostBlock(segment) {
    override fun run() {
        arena.close()
        pool.releaseLarge(segment.byteSize())
    }
}
