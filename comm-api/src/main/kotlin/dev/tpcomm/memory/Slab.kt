package dev.tpcomm.memory

import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment

/**
 * A run of equal blocks of one [SizeClass], carved from one shared arena that lives until the
 * whole slab is free and the pool decides not to keep it ([SizeClass.free]).
 *
 * Mutable state is guarded by the size class's lock. Blocks are handed out first from the free
 * stack (blocks given back, whose bytes are stale) and then by bumping [fresh] (never used, still
 * zero from the arena's allocation).
 */
internal class Slab(
    @JvmField val sizeClass: SizeClass,
    private val arena: Arena,
    @JvmField val memory: MemorySegment,
    @JvmField val blocks: Int,
) {
    /** Indices of blocks given back, a stack of [freeCount] entries. */
    @JvmField val freeStack: IntArray = IntArray(blocks)
    @JvmField var freeCount: Int = 0

    /** Blocks `fresh until blocks` were never handed out. */
    @JvmField var fresh: Int = 0

    /** True while the slab is on its size class's list of slabs with a block to hand out. */
    @JvmField var listed: Boolean = false

    /**
     * Ticks of the [IdleSlabTrimmer] this slab spent wholly free without an allocation from it;
     * reset by every allocation from a wholly free slab.
     */
    @JvmField var idleTicks: Int = 0

    /** Set once [release] closed the arena; the slab is then unreachable from the pool. */
    @JvmField var released: Boolean = false

    val inUse: Int get() = fresh - freeCount
    val isFull: Boolean get() = freeCount == 0 && fresh == blocks
    val isEmpty: Boolean get() = inUse == 0

    /** Frees the slab's memory. Called outside the size class's lock: a shared arena's close waits on every thread. */
    fun release() = arena.close()
}
