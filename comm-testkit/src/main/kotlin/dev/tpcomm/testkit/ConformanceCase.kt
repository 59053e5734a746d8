package dev.tpcomm.testkit

import dev.tpcomm.Communicator

/**
 * One named conformance case: an SPMD program every rank of a world runs with its own
 * [Communicator]. Deterministic given the [CaseContext.seed], so the ranks of a multi-process
 * world agree on every parameter and input without communicating.
 *
 * @property name unique, human-readable name (used as the test name and in JUnit XML).
 * @property kind what the case does to the communicator; decides where runners run it.
 * @property minWorldSize smallest world the case means anything in; smaller worlds skip it.
 * @property skipReason given the options and world size, why the case does not apply (null: it runs).
 * @property body the program; it records wrong results in the context and may throw on unexpected errors.
 */
public class ConformanceCase(
    public val name: String,
    public val kind: CaseKind,
    public val minWorldSize: Int = 1,
    public val skipReason: (ConformanceOptions, Int) -> String? = { _, _ -> null },
    public val body: suspend (Communicator, CaseContext) -> Unit,
) {
    /** Why this case does not run with [options] in a world of [worldSize], or null when it runs. */
    public fun whyNotRun(options: ConformanceOptions, worldSize: Int): String? =
        if (worldSize < minWorldSize) "needs at least $minWorldSize ranks, the world has $worldSize" else skipReason(options, worldSize)

    override fun toString(): String = "ConformanceCase($name, $kind)"
}

/** What a [ConformanceCase] does to the communicator it runs on. */
public enum class CaseKind {
    /** Correct programs (and refused bad arguments): the communicator stays usable afterwards. */
    Collective,

    /**
     * Failure modes: the case aborts its communicator on purpose. Runners give it a fresh
     * communicator whose timeout is [ConformanceOptions.failureTimeout], and run these cases after
     * every [Collective] case.
     */
    Failure,

    /** The long soak; runners include it only when asked. */
    Soak,
}
