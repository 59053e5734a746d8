package dev.tpcomm.bench

/** Parsing and printing of byte counts with K/M/G suffixes (binary: 1K = 1024). */
public object Sizes {
    /**
     * Parses one byte count: a whole number with an optional suffix `K`, `M`, `G` (powers of 1024;
     * `KiB`, `KB`, `k` and a trailing `B` are accepted too), e.g. `8`, `64K`, `1M`, `2GiB`.
     *
     * @throws IllegalArgumentException saying what a valid size looks like.
     */
    public fun parse(text: String): Long {
        val t = text.trim()
        val m = Regex("""^(\d+)\s*([kKmMgG]?)(i?[bB])?$""").matchEntire(t)
            ?: throw IllegalArgumentException("size '$text' is not a byte count; write e.g. 8, 1024, 64K, 1M or 1G")
        val base = m.groupValues[1].toLongOrNull()
            ?: throw IllegalArgumentException("size '$text' is too large")
        val mult = when (m.groupValues[2].lowercase()) {
            "" -> 1L
            "k" -> 1L shl 10
            "m" -> 1L shl 20
            else -> 1L shl 30
        }
        require(base <= Long.MAX_VALUE / mult) { "size '$text' is too large" }
        return base * mult
    }

    /** Parses a comma-separated list of sizes (see [parse]); order is kept, duplicates removed. */
    public fun parseList(text: String): List<Long> {
        val parts = text.split(',').map { it.trim() }.filter { it.isNotEmpty() }
        require(parts.isNotEmpty()) { "--sizes needs at least one size, e.g. --sizes 8,1K,64K,1M" }
        return parts.map { parse(it) }.distinct()
    }

    /**
     * nccl-tests' range: from [min] to [max] bytes, each step multiplying by [factor] (when > 1)
     * or else adding [increment].
     *
     * @throws IllegalArgumentException when the range is empty or never grows.
     */
    public fun range(min: Long, max: Long, factor: Long = 2, increment: Long = 0): List<Long> {
        require(min >= 1) { "-b (minimum size) must be at least 1 byte, got $min" }
        require(max >= min) { "-e (maximum size) $max is below -b (minimum size) $min" }
        require(factor > 1 || increment > 0) { "a size range needs -f FACTOR > 1 or -i INCREMENT > 0" }
        val out = ArrayList<Long>()
        var s = min
        while (s <= max) {
            out += s
            val next = if (factor > 1) s * factor else s + increment
            if (next <= s) break
            s = next
        }
        return out
    }

    /** Human form of [bytes]: `8 B`, `1 KiB`, `64 MiB` (exact multiples only, else bytes). */
    public fun human(bytes: Long): String = when {
        bytes >= 1L shl 30 && bytes % (1L shl 30) == 0L -> "${bytes shr 30} GiB"
        bytes >= 1L shl 20 && bytes % (1L shl 20) == 0L -> "${bytes shr 20} MiB"
        bytes >= 1L shl 10 && bytes % (1L shl 10) == 0L -> "${bytes shr 10} KiB"
        else -> "$bytes B"
    }
}
