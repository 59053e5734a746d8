package dev.tpcomm.memory

/**
 * The pool's size classes: multiples of 64 bytes up to 512, then four classes per doubling
 * (640, 768, 896, 1024, 1280, ...) up to [MAX_POOLED_BYTES], so a block wastes at most a quarter
 * of its size beyond 512 bytes. Every class is a multiple of [ALIGNMENT].
 */
internal object SizeClasses {
    const val ALIGNMENT: Long = 64
    const val MAX_POOLED_BYTES: Long = 4L shl 20
    private const val SMALL_LIMIT = 512L
    private const val SMALL_CLASSES = 8 // 64, 128, ..., 512
    private const val FIRST_LOG2 = 9 // 2^9 = 512: classes above it, four per doubling
    private const val LAST_LOG2 = 21 // (2^21, 2^22] is the last doubling

    const val COUNT: Int = SMALL_CLASSES + (LAST_LOG2 - FIRST_LOG2 + 1) * 4

    /** Target slab size: 64 blocks, at least 64 KiB and at most 1 MiB (one block for larger classes). */
    private const val MIN_SLAB = 64L shl 10
    private const val MAX_SLAB = 1L shl 20

    /** Index of the smallest class holding [bytes] (0 ≤ bytes ≤ [MAX_POOLED_BYTES]). */
    fun indexOf(bytes: Long): Int {
        if (bytes <= SMALL_LIMIT) return if (bytes <= ALIGNMENT) 0 else ((bytes + ALIGNMENT - 1) / ALIGNMENT - 1).toInt()
        val k = 63 - java.lang.Long.numberOfLeadingZeros(bytes - 1) // 2^k < bytes <= 2^(k+1)
        val quarter = 1L shl (k - 2)
        val j = ((bytes - (1L shl k) + quarter - 1) / quarter).toInt() // 1..4
        return SMALL_CLASSES + (k - FIRST_LOG2) * 4 + (j - 1)
    }

    /** Block size of class [index]. */
    fun blockSize(index: Int): Long {
        if (index < SMALL_CLASSES) return (index + 1) * ALIGNMENT
        val i = index - SMALL_CLASSES
        val k = FIRST_LOG2 + i / 4
        val j = i % 4 + 1
        return (1L shl k) + j * (1L shl (k - 2))
    }

    /** Blocks per slab for blocks of [blockSize] bytes. */
    fun blocksPerSlab(blockSize: Long): Int {
        val slab = (blockSize * 64).coerceIn(MIN_SLAB, MAX_SLAB)
        return maxOf(1L, slab / blockSize).toInt()
    }
}
