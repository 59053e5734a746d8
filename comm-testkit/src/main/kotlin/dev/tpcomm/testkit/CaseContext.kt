package dev.tpcomm.testkit

import kotlin.random.Random

/**
 * What a [ConformanceCase] gets besides its communicator: the shared [seed], the backend's
 * [options], and soft assertions.
 *
 * Every rank builds its own context from the same seed, so [random] yields the same sequence on
 * every rank: a case draws its parameters from it and every rank agrees on them without talking.
 * Inputs are derived from the seed too, so each rank can compute every other rank's input and the
 * reference result locally.
 *
 * [expect] and [fail] record a failure and let the case go on, so a rank with a wrong result still
 * makes the same calls as the others and the world stays in step; the runner fails the case when
 * anything was recorded. Thread-safe: concurrent coroutines of one rank may record failures.
 */
public class CaseContext(
    /** Seed shared by all ranks. */
    public val seed: Long,
    /** The backend's capabilities and budget. */
    public val options: ConformanceOptions,
) {
    /** A generator that yields the same sequence on every rank (seeded with [seed]). Not thread-safe. */
    public val random: Random = Random(seed)

    private val recorded = mutableListOf<String>()

    /** Records [message] as a failure when [condition] is false. */
    public fun expect(condition: Boolean, message: () -> String) {
        if (!condition) fail(message())
    }

    /** Records a failure. */
    public fun fail(message: String) {
        synchronized(recorded) { if (recorded.size < MAX_RECORDED) recorded += message else if (recorded.size == MAX_RECORDED) recorded += "(more failures not shown)" }
    }

    /** The failures recorded so far, in order. */
    public val failures: List<String> get() = synchronized(recorded) { recorded.toList() }

    private companion object {
        const val MAX_RECORDED = 20
    }
}
