package dev.tpcomm.gpu

/**
 * The stream-ordered cache of one device's output blocks (the outputs of `allGather`,
 * `reduceScatter`, `gather`, `allToAll` and the uneven variants), so that a loop of collectives
 * whose outputs repeat their sizes reuses memory instead of a `cudaMallocAsync`/`cudaFreeAsync`
 * pair per call. In the spirit of PyTorch's caching allocator (pytorch/pytorch
 * `c10/cuda/CUDACachingAllocator.cpp`, header comment: blocks are cached per stream and sizes are
 * rounded to 512 bytes, `kMinBlockSize`; memory freed on one stream is reused by another only after
 * `recordStream`'s events).
 *
 * - **Per stream.** A block freed ([give]) is cached for the stream it was allocated on, the
 *   communicator's stream, after its free was ordered there (the event [DeviceFree] recorded on the
 *   consumer stream and made that stream wait for): later work on that stream runs after every use
 *   of the old tensor, so [take] hands it out at once, as CUDA's stream-ordered allocator reuses a
 *   `cudaFreeAsync`'d block on the same stream (CUDA Runtime API, `cudaMemPoolSetAttribute`: reuse
 *   across streams only with `cudaMemPoolReuseFollowEventDependencies` or opportunistically after
 *   the free completed). Blocks are never handed to another stream: such a reuse would need an event.
 * - **By rounded size.** [blockSize] rounds a request up to [GRANULE] bytes; [take] returns a block
 *   of exactly that size (no splitting), so a block's bytes are what the budget counts.
 * - **Counted.** A cached block stays counted in the device's budget ([DeviceMemoryBudget]); the
 *   budget asks [releaseIdle] to free every cached block (`cudaFreeAsync` on its stream, the bytes
 *   returned to the caller to release) before it reclaims forgotten outputs or fails.
 * - **Streams retire.** [retire] frees the cached blocks of a closed communicator's stream at once;
 *   outputs of it still alive are freed on their stream when closed ([give] then frees rather than
 *   caches) and the last of them reports the stream unused, so its [DeviceThread] can destroy it.
 *
 * Not the CUDA memory pool's release threshold (`cudaMemPoolAttrReleaseThreshold`, default 0:
 * "when more than the release threshold bytes of memory are held by the memory pool, the allocator
 * will try to release memory back to the OS on the next call to stream, event or context
 * synchronize"): that is a process-wide setting of the device's default pool, which other libraries
 * of the process share (PyTorch's own `cudaMallocAsync` backend among them), and not one HIP
 * binding of tpcomm can assume; the cache is tpcomm's own and counted in its budget.
 *
 * Thread-safety: none; the device's native thread only.
 */
internal class DeviceOutputPool(
    private val runtime: DeviceRuntime,
    /** False (`-Dtpcomm.memory.devicePool=false`, [PROPERTY]): every block given back is freed at once, as before the pool; for debugging and comparison. */
    private val caching: Boolean = cachingFromProperty(),
) {
    private class StreamBlocks(val stream: Long) {
        /** Cached blocks by size. */
        val free = HashMap<Long, ArrayDeque<Long>>()

        /** Blocks of this stream handed out ([take] or [allocated]) and not yet given back. */
        var live = 0
        var retired = false
    }

    private val streams = HashMap<Long, StreamBlocks>()

    /** Bytes of the blocks cached for reuse, all streams. */
    var cachedBytes: Long = 0L
        private set

    /** A cached block of exactly [size] bytes ([blockSize]) for work on [stream], or 0 when none is cached. */
    fun take(stream: Long, size: Long): Long {
        val s = streams[stream] ?: return 0L
        if (s.retired) return 0L
        val q = s.free[size] ?: return 0L
        val ptr = q.removeLastOrNull() ?: return 0L
        if (q.isEmpty()) s.free.remove(size)
        cachedBytes -= size
        s.live++
        return ptr
    }

    /** A block of [stream] just allocated from the runtime is handed out. */
    fun allocated(stream: Long) {
        streams.getOrPut(stream) { StreamBlocks(stream) }.live++
    }

    /**
     * Takes back a block of [size] bytes handed out on [stream], its free already ordered after its
     * last use on [stream]: cached, or freed (`cudaFreeAsync` on [stream]) when the stream retired
     * (or the pool does not cache).
     * Returns the bytes freed to the runtime (0 when cached), and calls [unused] when this was the
     * last block of a retired stream.
     */
    fun give(ptr: Long, size: Long, stream: Long, unused: (Long) -> Unit): Long {
        val s = streams.getOrPut(stream) { StreamBlocks(stream) }
        s.live--
        if (!s.retired && caching) {
            s.free.getOrPut(size) { ArrayDeque() }.addLast(ptr)
            cachedBytes += size
            return 0L
        }
        runtime.freeAsync(ptr, stream)
        if (s.retired && s.live <= 0) {
            streams.remove(stream)
            unused(stream)
        }
        return size
    }

    /** Frees every cached block (`cudaFreeAsync` on its stream); returns the bytes freed. */
    fun releaseIdle(): Long {
        var freed = 0L
        for (s in streams.values) freed += freeCached(s)
        streams.values.removeIf { it.live <= 0 && !it.retired }
        return freed
    }

    /**
     * [stream]'s communicator closed: its cached blocks are freed now (returned bytes) and no block is
     * cached for it again. [unused] is called at once when no output of it is alive, else by the [give]
     * of its last one.
     */
    fun retire(stream: Long, unused: (Long) -> Unit): Long {
        val s = streams[stream] ?: run {
            unused(stream)
            return 0L
        }
        val freed = freeCached(s)
        s.retired = true
        if (s.live <= 0) {
            streams.remove(stream)
            unused(stream)
        }
        return freed
    }

    /** Retired streams that still have outputs alive (at the thread's end: destroyed with it). */
    fun retiredInUse(): List<Long> = streams.values.filter { it.retired }.map { it.stream }

    private fun freeCached(s: StreamBlocks): Long {
        var freed = 0L
        for ((size, q) in s.free) {
            for (ptr in q) {
                runtime.freeAsync(ptr, s.stream)
                freed += size
            }
        }
        s.free.clear()
        cachedBytes -= freed
        return freed
    }

    companion object {
        /** The system property that turns caching off (`false`); anything else, or unset, leaves it on. */
        const val PROPERTY: String = "tpcomm.memory.devicePool"

        /** Whether [PROPERTY] leaves caching on. */
        fun cachingFromProperty(): Boolean = System.getProperty(PROPERTY)?.trim()?.equals("false", ignoreCase = true) != true

        /** Sizes are rounded up to a multiple of this (PyTorch's `kMinBlockSize`, 512 bytes). */
        const val GRANULE: Long = 512

        /** The block size of a request of [bytes] (at least one granule). */
        fun blockSize(bytes: Long): Long = (bytes.coerceAtLeast(1) + GRANULE - 1) / GRANULE * GRANULE
    }
}
