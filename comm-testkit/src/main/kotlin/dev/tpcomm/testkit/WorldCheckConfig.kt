package dev.tpcomm.testkit

import kotlin.time.Duration
import kotlin.time.Duration.Companion.seconds

/**
 * How [forAllWorlds] runs a property.
 *
 * @property worldSizes the world sizes (numbers of ranks) to run on. The first iteration runs on the
 *   largest (most likely to show a bug), the others on sizes drawn from this list; a failure is
 *   shrunk to the smallest of these sizes that still fails.
 * @property iterations how many worlds to run (each with a new input), at least 1.
 * @property seed the seed of the world sizes and inputs; null (the default) takes the system
 *   property `tpcomm.testkit.seed`, else a random seed. A failure reports its seed, so passing it
 *   here reproduces the failure.
 * @property timeout every collective's deadline ([dev.tpcomm.CommConfig.timeout]): a rank left
 *   waiting for a collective the others never call fails with a `CommunicationException` after
 *   this. A world whose ranks are still running after `2 * timeout + 10 s` is cancelled and
 *   reported as hung.
 * @property checkConsistency passed to [dev.tpcomm.CommConfig.checkConsistency]: ranks calling
 *   different collectives (or the same with different shapes) fail with a
 *   `CollectiveMismatchException` naming the ranks and fields.
 * @property launcher starts the worlds; [LocalWorldLauncher] (the in-process local backend, ranks
 *   on `Dispatchers.Default`) by default.
 */
public data class WorldCheckConfig(
    public val worldSizes: List<Int> = listOf(1, 2, 3, 4),
    public val iterations: Int = 20,
    public val seed: Long? = null,
    public val timeout: Duration = 30.seconds,
    public val checkConsistency: Boolean = true,
    public val launcher: WorldLauncher = LocalWorldLauncher,
) {
    init {
        require(worldSizes.isNotEmpty() && worldSizes.all { it >= 1 }) {
            "WorldCheckConfig: worldSizes must list at least one size, each >= 1; got $worldSizes"
        }
        require(iterations >= 1) { "WorldCheckConfig: iterations must be >= 1, got $iterations" }
        require(timeout.isPositive()) { "WorldCheckConfig: timeout must be positive, got $timeout" }
    }
}
