package dev.tpcomm.bench

/**
 * When [BenchRunner]'s default warm-up at one size may stop: once the time per call has settled,
 * that is, for [settleSeconds] no chunk of calls has been [improvement] faster than the best chunk
 * as of the last such improvement (so a slow, steady gain of 1% per chunk counts too), or once
 * [capSeconds] have passed.
 *
 * A fixed count or time does not reach the steady state the timed repeats claim to measure: a fresh
 * JVM's 8-byte in-process all-reduce still ran partly in C1 code after the old default (20,000
 * calls), reading 3.9 µs where the settled path reads 1.1 µs, and the JIT's phases (interpreted, C1,
 * C2, recompilations after a trap) each take from milliseconds to a second depending on the size and
 * the load. Fed only values every rank shares (the max-reduced elapsed time), so every rank stops
 * after the same chunk. Not thread-safe: one warm-up at a time.
 */
internal class WarmUpSettling(
    /** The longest warm-up, seconds (`--warmup-time`). */
    private val capSeconds: Double,
    /** How long no chunk may improve on the best for the time to count as settled, seconds. */
    private val settleSeconds: Double = SETTLE_SECONDS,
    /** The fraction by which a chunk must beat the best to restart the settling clock. */
    private val improvement: Double = IMPROVEMENT,
) {
    init {
        require(capSeconds >= 0 && settleSeconds > 0 && improvement in 0.0..1.0) {
            "WarmUpSettling: cap $capSeconds s, settle $settleSeconds s and improvement $improvement out of range"
        }
    }

    private var best = Double.MAX_VALUE
    /** The best time per call when the settling clock last restarted, and when that was. */
    private var anchor = Double.MAX_VALUE
    private var anchorAt = 0.0
    private var last = 0.0

    /** The last chunk's length, seconds (the caller doubles short chunks). */
    var lastChunkSeconds: Double = 0.0
        private set

    /** The best time per call seen so far, seconds (infinite before the first chunk). */
    val bestPerCall: Double get() = if (best == Double.MAX_VALUE) Double.POSITIVE_INFINITY else best

    /**
     * Adds a chunk of [calls] calls that ended [elapsed] seconds after the warm-up began; true when
     * the warm-up may stop.
     */
    fun settled(calls: Long, elapsed: Double): Boolean {
        require(calls > 0 && elapsed >= last) { "WarmUpSettling: chunk of $calls calls ending at $elapsed s (the last ended at $last s)" }
        lastChunkSeconds = elapsed - last
        last = elapsed
        val perCall = lastChunkSeconds / calls
        if (perCall < best) best = perCall
        if (perCall < anchor * (1 - improvement)) {
            anchor = perCall
            anchorAt = elapsed
        }
        return elapsed >= capSeconds || elapsed - anchorAt >= settleSeconds
    }

    companion object {
        /** [settleSeconds]' default. */
        const val SETTLE_SECONDS: Double = 0.5

        /** [improvement]'s default: 5%, above the chunks' noise on a quiet machine. */
        const val IMPROVEMENT: Double = 0.05

        /** A chunk of calls shorter than this doubles for the next one, seconds. */
        const val CHUNK_SECONDS: Double = 0.01
    }
}
