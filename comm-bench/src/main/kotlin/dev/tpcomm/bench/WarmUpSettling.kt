package dev.tpcomm.bench

/**
 * When [BenchRunner]'s default warm-up at one size may stop: once the time per call has settled,
 * that is, for [settleSeconds] no chunk of calls has been [improvement] faster than the best chunk
 * as of the last such improvement (so a slow, steady gain of 1% per chunk counts too), and at least
 * [minCalls] calls or [minSeconds] have passed; or once [capSeconds] have passed.
 *
 * The old default (20,000 calls or 0.5 s, whichever first) did not reach the steady state the timed
 * repeats claim to measure when the VM was in its slow state: a fresh JVM's 8-byte in-process
 * all-reduce read 3.5-4.5 µs in 5 of 8 runs where 300,000 warm-up calls read 1.05-1.84 µs in all 8
 * (alternating, 2026-11-29). The JIT's phases (interpreted, C1, C2, recompilations after a trap)
 * take from milliseconds to a second each, depending on the size and the load, and a phase can hold
 * the time flat for a while: hence the settling time and the minimum. Fed only values every rank
 * shares (the max-reduced elapsed time), so every rank stops after the same chunk. Not thread-safe:
 * one warm-up at a time.
 */
internal class WarmUpSettling(
    /** The longest warm-up, seconds (`--warmup-time`). */
    private val capSeconds: Double,
    /** How long no chunk may improve on the best for the time to count as settled, seconds. */
    private val settleSeconds: Double = SETTLE_SECONDS,
    /** The fraction by which a chunk must beat the best to restart the settling clock. */
    private val improvement: Double = IMPROVEMENT,
    /** Calls before the time may count as settled (unless [minSeconds] passed first). */
    private val minCalls: Long = MIN_CALLS,
    /** Seconds before the time may count as settled (unless [minCalls] were made first). */
    private val minSeconds: Double = MIN_SECONDS,
) {
    init {
        require(capSeconds >= 0 && settleSeconds > 0 && improvement in 0.0..1.0 && minCalls >= 0 && minSeconds >= 0) {
            "WarmUpSettling: cap $capSeconds s, settle $settleSeconds s, improvement $improvement, minimum $minCalls calls or $minSeconds s out of range"
        }
    }

    private var totalCalls = 0L
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
        totalCalls += calls
        val perCall = lastChunkSeconds / calls
        if (perCall < best) best = perCall
        if (perCall < anchor * (1 - improvement)) {
            anchor = perCall
            anchorAt = elapsed
        }
        if (elapsed >= capSeconds) return true
        return elapsed - anchorAt >= settleSeconds && (totalCalls >= minCalls || elapsed >= minSeconds)
    }

    companion object {
        /** [settleSeconds]' default. */
        const val SETTLE_SECONDS: Double = 0.5

        /** [improvement]'s default: 5%, above the chunks' noise on a quiet machine. */
        const val IMPROVEMENT: Double = 0.05

        /** [minCalls]' default: 300,000 warm-up calls reached the steady state where 20,000 did not. */
        const val MIN_CALLS: Long = 300_000

        /** [minSeconds]' default: a large size reaches [MIN_CALLS] only after minutes. */
        const val MIN_SECONDS: Double = 2.0

        /** A chunk of calls shorter than this doubles for the next one, seconds. */
        const val CHUNK_SECONDS: Double = 0.01
    }
}
