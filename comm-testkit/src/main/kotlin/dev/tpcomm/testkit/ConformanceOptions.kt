package dev.tpcomm.testkit

import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import kotlin.time.Duration
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/**
 * What a backend supports and how hard the conformance suite drives it.
 *
 * Capabilities decide which cases run: a dtype missing from [dtypes] is never generated; a
 * [ReduceOp] missing from [ops], or a dtype in [dtypes] but missing from [reducedDtypes], is not
 * used for reductions, and instead the suite checks that the backend refuses it with
 * [IllegalArgumentException] before any data moves (e.g. NCCL has no bitwise reductions and no
 * int16). Cases needing more ranks than a world has are skipped.
 *
 * Budget settings default to values that keep the local backend's full run well under three
 * minutes on a loaded two-core machine; [withSystemProperties] overrides them from `-D` flags.
 *
 * @property dtypes element types the backend moves.
 * @property ops reductions the backend performs; the others must be refused with [IllegalArgumentException].
 * @property reducedDtypes the dtypes of [dtypes] the backend reduces (all of them by default); the
 * backend moves the others but must refuse their reductions with an [IllegalArgumentException]
 * that names the dtype.
 * @property pointToPoint whether send/recv/probe are implemented.
 * @property taggedPointToPoint whether messages are matched by tag, with ANY_SOURCE, ANY_TAG and
 * probe (MPI, local); false for backends that match messages between two ranks by order only
 * (NCCL/RCCL: `ncclSend`/`ncclRecv` have no tag), which run the tag-0 cases only.
 * @property groups whether split/group are implemented.
 * @property objectCollectives whether allGatherObject/broadcastObject work (they do through the defaults of [dev.tpcomm.Communicator]).
 * @property checksConsistency whether mismatched collectives are detected (the local backend always;
 * native backends when `CommConfig.checkConsistency` is on). When false the mismatch cases are skipped.
 * @property maxWorldSize largest world the property tests and in-process cases create.
 * @property worldSizes world sizes the in-process spec runs every [ConformanceCases] case with
 * (sizes above [maxWorldSize] are dropped).
 * @property timeout `CommConfig.timeout` of worlds running correct programs; a bug surfaces as a failure after this long instead of hanging.
 * @property failureTimeout `CommConfig.timeout` of worlds running the failure-mode cases; every rank must end
 * with the expected exception within twice this.
 * @property propertyIterations iterations of each Kotest property test.
 * @property randomCollectives random collectives in the SPMD case `random collectives`.
 * @property soakCollectives collectives the soak issues on every rank.
 * @property soakConcurrency coroutines per rank the soak keeps in flight.
 * @property soakWorldSize world size of the in-process soak.
 * @property maxElements upper bound on the element count of randomly generated tensors (an occasional large tensor exercises chunked reductions); the `large tensors` case uses four times this.
 * @property seed seed of every generated input; all ranks of an SPMD run must use the same one.
 * @property propertySeed seed of the Kotest property tests; null lets Kotest pick one (it prints it on failure).
 * @property placement how test data reaches the backend's memory.
 */
public data class ConformanceOptions(
    public val dtypes: Set<DType> = DType.entries.toSet(),
    public val ops: Set<ReduceOp> = ReduceOp.entries.toSet(),
    public val pointToPoint: Boolean = true,
    public val taggedPointToPoint: Boolean = true,
    public val groups: Boolean = true,
    public val objectCollectives: Boolean = true,
    public val checksConsistency: Boolean = true,
    public val maxWorldSize: Int = 8,
    public val worldSizes: List<Int> = listOf(1, 2, 3, 4, 8),
    public val timeout: Duration = 60.seconds,
    public val failureTimeout: Duration = 1.seconds,
    public val propertyIterations: Int = 100,
    public val randomCollectives: Int = 100,
    public val soakCollectives: Int = 10_000,
    public val soakConcurrency: Int = 64,
    public val soakWorldSize: Int = 4,
    public val maxElements: Int = 20_000,
    public val seed: Long = 20261122L,
    public val propertySeed: Long? = null,
    public val placement: TensorPlacement = TensorPlacement.Host,
    public val reducedDtypes: Set<DType> = dtypes,
) {
    init {
        require(dtypes.isNotEmpty()) { "ConformanceOptions.dtypes must not be empty" }
        require(ReduceOp.Sum in ops) { "ConformanceOptions.ops must contain Sum: every backend sums" }
        require(maxWorldSize >= 1) { "maxWorldSize must be >= 1, got $maxWorldSize" }
        require(worldSizes.all { it >= 1 }) { "worldSizes must all be >= 1, got $worldSizes" }
        require(failureTimeout >= 100.milliseconds) { "failureTimeout must be at least 100ms, got $failureTimeout" }
        require(propertyIterations >= 1 && randomCollectives >= 0 && soakCollectives >= 0) {
            "iteration counts must be positive: propertyIterations=$propertyIterations randomCollectives=$randomCollectives soakCollectives=$soakCollectives"
        }
        require(soakConcurrency >= 1) { "soakConcurrency must be >= 1, got $soakConcurrency" }
        require(soakWorldSize >= 1) { "soakWorldSize must be >= 1, got $soakWorldSize" }
        require(maxElements >= 64) { "maxElements must be >= 64, got $maxElements" }
    }

    /**
     * Whether [op] is performed on [dtype]: defined there ([ReduceOp.supports]), listed in [ops]
     * ([ReduceOp.PreMulSum], whatever its factor, is performed by every backend: natively on
     * NCCL/RCCL, scaled on the host elsewhere), and [dtype] in [reducedDtypes].
     */
    public fun performs(op: ReduceOp, dtype: DType): Boolean = (op is ReduceOp.PreMulSum || op in ops) && op.supports(dtype) && dtype in reducedDtypes

    /** The world sizes the in-process spec runs the cases with: [worldSizes] up to [maxWorldSize]. */
    public val effectiveWorldSizes: List<Int> get() = worldSizes.filter { it <= maxWorldSize }.distinct()

    /**
     * A copy with budget settings overridden by system properties, when set:
     * `tpcomm.testkit.iterations` ([propertyIterations]), `tpcomm.testkit.randomCollectives`,
     * `tpcomm.testkit.soak.collectives`, `tpcomm.testkit.soak.concurrency`, `tpcomm.testkit.soak.worldSize`,
     * `tpcomm.testkit.seed` (also fixes [propertySeed]), `tpcomm.testkit.failureTimeoutMillis`,
     * `tpcomm.testkit.maxWorldSize`.
     *
     * @throws IllegalArgumentException when a property is not a number.
     */
    public fun withSystemProperties(properties: Map<String, String> = systemProperties()): ConformanceOptions {
        fun long(key: String): Long? = properties[key]?.let {
            it.trim().toLongOrNull() ?: throw IllegalArgumentException("system property $key=\"$it\" is not an integer")
        }
        fun int(key: String): Int? = long(key)?.toInt()
        var o = this
        int("tpcomm.testkit.iterations")?.let { o = o.copy(propertyIterations = it) }
        int("tpcomm.testkit.randomCollectives")?.let { o = o.copy(randomCollectives = it) }
        int("tpcomm.testkit.soak.collectives")?.let { o = o.copy(soakCollectives = it) }
        int("tpcomm.testkit.soak.concurrency")?.let { o = o.copy(soakConcurrency = it) }
        int("tpcomm.testkit.soak.worldSize")?.let { o = o.copy(soakWorldSize = it) }
        int("tpcomm.testkit.maxWorldSize")?.let { o = o.copy(maxWorldSize = it) }
        long("tpcomm.testkit.failureTimeoutMillis")?.let { o = o.copy(failureTimeout = it.milliseconds) }
        long("tpcomm.testkit.seed")?.let { o = o.copy(seed = it, propertySeed = it) }
        return o
    }

    private companion object {
        fun systemProperties(): Map<String, String> =
            System.getProperties().stringPropertyNames().associateWith { System.getProperty(it) }
    }
}
