package dev.tpcomm.testkit

/**
 * A property run by [forAllWorlds] failed. Thrown once, to the caller of [forAllWorlds] (a Kotest
 * test fails with it), after shrinking: [worldSize] is the smallest configured world size that
 * still fails with the same seed.
 *
 * The message says, for the smallest failing world: which rank failed and with what (the root
 * cause, chosen from what failed and not from timing, so that the same seed gives the same report:
 * the lowest rank whose own code threw something other than a `CommunicationException`, else the
 * lowest rank with a timeout or mismatch, else the lowest failed rank; its exception is [cause]),
 * what every other rank ended with (usually a `CommunicationException` because the world was
 * aborted when that rank failed), which ranks hung, the input, the world sizes tried while
 * shrinking, and the seed that reproduces it.
 *
 * @property worldSize the smallest failing world size.
 * @property firstFailedWorldSize the world size of the iteration that first failed.
 * @property failedRank the rank the message leads with in the smallest failing world (see above), or -1 when no rank
 *   threw (every failing rank hung, or the launcher itself failed).
 * @property rankFailures every rank's exception in the smallest failing world, by rank (ranks that
 *   passed or hung are absent).
 * @property hungRanks the ranks still running when the world was cancelled ([WorldCheckConfig.timeout]).
 * @property input the input of the smallest failing world (null for a property without input).
 * @property seed the seed of the whole run: `WorldCheckConfig(seed = ...)` reproduces it.
 */
public class WorldPropertyException internal constructor(
    message: String,
    cause: Throwable?,
    public val worldSize: Int,
    public val firstFailedWorldSize: Int,
    public val failedRank: Int,
    public val rankFailures: Map<Int, Throwable>,
    public val hungRanks: List<Int>,
    public val input: Any?,
    public val seed: Long,
) : AssertionError(message, cause)
