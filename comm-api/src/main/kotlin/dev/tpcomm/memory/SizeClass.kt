package dev.tpcomm.memory

import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment

/**
 * The blocks of one size: slabs of [blocksPerSlab] blocks of [blockSize] bytes, and the list of
 * slabs that still have a block to hand out. Thread-safe: every change happens under this
 * object's monitor, held for a few field updates (never across an arena's allocation or close).
 */
internal class SizeClass(
    private val pool: HostMemoryPool,
    @JvmField val blockSize: Long,
    @JvmField val blocksPerSlab: Int,
) {
    /** Slabs with at least one block to hand out; allocation takes from the end. */
    private val available = ArrayList<Slab>()

    /** Slabs wholly free, kept for reuse (all of them are also in [available]). */
    private var emptySlabs = 0

    /** Blocks handed out and not given back. */
    private var inUse = 0L

    /** Slabs created and not released. */
    private var slabs = 0

    val slabBytes: Long get() = blockSize * blocksPerSlab

    /** A block of [bytes] (at most [blockSize]) bytes, zeroed when [zero] is true. */
    fun allocate(bytes: Long, zero: Boolean): SlabBlock {
        while (true) {
            tryAllocate(bytes, zero)?.let { return it }
            addSlab()
        }
    }

    private fun tryAllocate(bytes: Long, zero: Boolean): SlabBlock? {
        val slab: Slab
        val index: Int
        val stale: Boolean
        synchronized(this) {
            if (available.isEmpty()) return null
            slab = available[available.size - 1]
            if (slab.isEmpty) {
                emptySlabs--
                pool.emptyBytes.addAndGet(-slabBytes)
                slab.idleTicks = 0
            }
            if (slab.freeCount > 0) {
                index = slab.freeStack[--slab.freeCount]
                stale = true
            } else {
                index = slab.fresh++
                stale = false
            }
            if (slab.isFull) {
                available.removeAt(available.size - 1)
                slab.listed = false
            }
            inUse++
        }
        val segment = slab.memory.asSlice(index * blockSize, bytes)
        if (zero && stale) segment.fill(0)
        return SlabBlock(segment, slab, index)
    }

    /**
     * Makes a new slab available (the arena's allocation, which zeroes the slab, runs outside the
     * lock), after counting it against the pool's budget; adds none when, while the budget was
     * reclaiming, a slab of this class got a free block.
     */
    private fun addSlab() {
        if (!pool.reserve(slabBytes) { hasAvailable() }) return
        val arena = Arena.ofShared()
        val memory: MemorySegment = try {
            arena.allocate(slabBytes, HostMemoryPool.SLAB_ALIGNMENT)
        } catch (e: Throwable) {
            arena.close()
            pool.budget.release(slabBytes)
            throw e
        }
        val slab = Slab(this, arena, memory, blocksPerSlab)
        synchronized(this) {
            slab.listed = true
            available.add(slab)
            emptySlabs++
            slabs++
            pool.emptyBytes.addAndGet(slabBytes)
        }
    }

    /**
     * Gives block [index] of [slab] back. A slab that becomes wholly free is kept for reuse while
     * the class keeps at most [HostMemoryPool.classRetainBytes] and the pool at most
     * [HostMemoryPool.retainBytes] of free slabs, or while the pool is
     * [under pressure][HostMemoryPool.underPressure]; otherwise its memory goes back to the system.
     */
    fun free(slab: Slab, index: Int) {
        var release = false
        var startTrimmer = false
        synchronized(this) {
            check(!slab.released) { "block freed into a released slab" }
            slab.freeStack[slab.freeCount++] = index
            inUse--
            if (!slab.listed) {
                slab.listed = true
                available.add(slab)
            }
            if (slab.isEmpty) {
                val keep = ((emptySlabs + 1) * slabBytes <= pool.classRetainBytes &&
                    pool.emptyBytes.get() + slabBytes <= pool.retainBytes) || pool.underPressure()
                if (keep) {
                    emptySlabs++
                    pool.emptyBytes.addAndGet(slabBytes)
                    startTrimmer = true
                } else {
                    available.remove(slab)
                    slab.listed = false
                    slab.released = true
                    slabs--
                    release = true
                }
            }
        }
        if (release) {
            slab.release()
            pool.budget.release(slabBytes)
        }
        if (startTrimmer) pool.trimmer.start()
    }

    private fun hasAvailable(): Boolean = synchronized(this) { available.isNotEmpty() }

    /**
     * Gives back the wholly free slabs that spent at least [idleTicks] trimmer ticks free (0: every
     * wholly free slab now) and counts one more idle tick on the others. Returns the bytes given back.
     */
    fun trimEmpty(idleTicks: Int): Long {
        var victims: ArrayList<Slab>? = null
        synchronized(this) {
            if (emptySlabs == 0) return 0
            val it = available.iterator()
            while (it.hasNext()) {
                val slab = it.next()
                if (!slab.isEmpty) continue
                if (idleTicks > 0 && slab.idleTicks++ < idleTicks) continue
                it.remove()
                slab.listed = false
                slab.released = true
                emptySlabs--
                slabs--
                pool.emptyBytes.addAndGet(-slabBytes)
                (victims ?: ArrayList<Slab>().also { v -> victims = v }).add(slab)
            }
        }
        val v = victims ?: return 0
        for (slab in v) {
            slab.release()
            pool.budget.release(slabBytes)
        }
        return v.size * slabBytes
    }

    /** Blocks handed out and not given back. */
    fun blocksInUse(): Long = synchronized(this) { inUse }

    /** Slabs this class holds (in use or kept free). */
    fun slabCount(): Int = synchronized(this) { slabs }
}
