package dev.tpcomm

import kotlin.time.Duration
import kotlin.time.Duration.Companion.minutes
import kotlin.time.DurationUnit
import kotlin.time.toDuration
import kotlin.time.toJavaDuration
import kotlin.time.toKotlinDuration

/**
 * Settings for creating a [Communicator]. Immutable; copy with changes through `copy(...)` in Kotlin
 * or [toBuilder] in Java.
 *
 * @property worldSize number of ranks (>= 1).
 * @property rank this process's rank, in `0 until worldSize` (ignored by in-process worlds, which
 * create every rank).
 * @property localRank rank among the processes of this host; GPU backends use it to pick the device.
 * @property timeout deadline of every call; past it the communicator aborts with
 * [CommunicationTimeoutException] on every rank.
 * @property checkConsistency whether ranks compare each collective's signature (operation, dtype,
 * shape, op, root, dim) before any data moves, so that a mismatch is a [CollectiveMismatchException]
 * naming the ranks and fields on every rank instead of an MPI error on some ranks and garbage on
 * others. `null` (the default) is the backend's default: on for the in-process backend (which
 * always checks, at no cost) and MPI (one all-gather of a 64-byte slot per rank before each
 * collective, which also carries an all-reduce, broadcast or barrier of up to 48 bytes; the full
 * signatures move only when the digests differ; figures in docs/mpi.md), off for NCCL and
 * RCCL (their check waits for the stream before each collective, which would undo the overlap
 * with compute; not measured on a GPU). `true` turns it on, `false` off (MPI, NCCL, RCCL; the
 * in-process backend ignores it); `TPCOMM_CHECK_CONSISTENCY` sets it in [fromEnvironment].
 * @property flightRecorderSize how many recent operations each communicator remembers for diagnostics.
 * @property rendezvous how GPU backends exchange their bootstrap id: `"mpi"`, `"env://"` (the store at
 * `MASTER_ADDR:MASTER_PORT` that rank 0 or torchrun's agent hosts, speaking PyTorch's TCPStore
 * protocol; comm-store), `"tcp://host:port"` (the store rank 0 hosts there), `"file:///shared/path"`,
 * or null for automatic (MPI when launched by mpirun, `env://` when `MASTER_ADDR` is set).
 * @property options backend-specific settings, by name (each backend documents its keys).
 * @property flightRecorderDir a directory where each rank writes its flight-recorder dump,
 * `<dir>/<communicator>-rank<R>.json`, on a timeout, abort or mismatch, on `close()` after a failure,
 * at JVM shutdown, and on demand; null (the default) takes the environment variable
 * `TPCOMM_FLIGHT_RECORDER_DIR` if it is set (whatever created the communicator), and otherwise writes
 * no files (dumps still travel in exceptions).
 * @property reproducibleReductions whether this communicator's floating-point `Sum`, `Avg` and
 * `PreMulSum` reductions are **reproducible** (docs/reproducible.md): each element the correctly
 * rounded result of the exact sum, so the same inputs give the same bits on any world size, rank
 * order, backend, algorithm and split into fused or bucketed calls; they cost about two exchanges
 * of the tensor and an exact local sum. `false` (the default): the backend's own reductions. A
 * call can choose either way (`comm.reproducible()`, `Reproducible.On`/`Off` in its coroutine
 * context); `TPCOMM_REPRODUCIBLE` sets it in [fromEnvironment]. Every rank must use the same setting.
 * @property creationTimeout deadline of creating a communicator: joining a world (`Comm.create`,
 * the native init that waits for every rank: `ncclCommInitRankConfig`, `MPI_Init_thread`, the
 * rendezvous) and making one from another (`split`, `group`, MPI's `duplicate`), counted from the
 * call on each rank. Past it the creation fails with [CommunicationTimeoutException] (operation
 * `create`, or the call's own name for `split`/`group`/`duplicate`, which also aborts the parent as
 * any timed-out collective does) on every rank that is waiting, and nothing it built is left behind.
 * `null` (the default) means [effectiveCreationTimeout]'s default: the longer of [timeout] and
 * [DEFAULT_CREATION_TIMEOUT] (5 minutes), since a creation waits for every process to start, load its
 * libraries and reach the rendezvous, which takes seconds to minutes whatever a single operation
 * takes (PyTorch gives its process groups minutes too, creation included: `kProcessGroupNCCLDefaultTimeout`,
 * 10 minutes, in `torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp`, surfaced as
 * `torch.distributed.constants.default_pg_nccl_timeout`): a short [timeout] that detects a stalled collective
 * quickly then does not fail a world whose ranks merely start a few seconds apart. Thread-safety and
 * cancellation are the creating call's: a cancelled creation leaves at once, whatever this says.
 * `TPCOMM_CREATION_TIMEOUT_SECONDS` sets it in [fromEnvironment].
 * @property warmUp how long a new communicator warms the JVM's call path before `Comm.create` (or
 * `runLocalWorld`, before each rank's block) returns it: the ranks all-reduce an 8-byte float32
 * host tensor (`Sum`) again and again for about this long, so the JIT has compiled the small-call
 * path before the first call of yours. A fresh JVM's first 20,000 small calls otherwise cost 15-55
 * times the steady state while C2 compiles on the ranks' cores (docs/BENCHMARKS.md, issue 37);
 * 2 seconds cut that to about 2 (in-process) to 5 (MPI) times on a 2-core machine. Every rank makes
 * the same number of calls: each call's sum says whether every rank is still within its time, so
 * ranks whose clocks or starts differ stop together. `Duration.ZERO` (the default): no warm-up; the
 * operations warmed count in the communicator's statistics and flight recorder like any other.
 * Backends whose collectives take no host tensor (NCCL, RCCL) fail the creation with an
 * [IllegalArgumentException] saying to leave it at zero. `TPCOMM_WARM_UP_SECONDS` sets it in
 * [fromEnvironment]. Every rank must use the same setting, as for any collective: a rank without
 * it issues its first operations against the others' warm-up calls (a mismatch, or a timeout).
 */
public data class CommConfig @JvmOverloads constructor(
    public val worldSize: Int = 1,
    public val rank: Int = 0,
    public val timeout: Duration = 10.minutes,
    public val checkConsistency: Boolean? = null,
    public val flightRecorderSize: Int = 256,
    public val localRank: Int = rank,
    public val rendezvous: String? = null,
    public val options: Map<String, String> = emptyMap(),
    public val flightRecorderDir: String? = null,
    public val reproducibleReductions: Boolean = false,
    public val creationTimeout: Duration? = null,
    public val warmUp: Duration = Duration.ZERO,
) {
    init {
        require(worldSize >= 1) { "worldSize must be >= 1, got $worldSize" }
        require(rank in 0 until worldSize) { "rank must be in 0 until $worldSize, got $rank" }
        require(localRank >= 0) { "localRank must be >= 0, got $localRank" }
        require(timeout.isPositive()) { "timeout must be positive, got $timeout" }
        require(creationTimeout == null || creationTimeout.isPositive()) { "creationTimeout must be positive or null, got $creationTimeout" }
        require(flightRecorderSize >= 0) { "flightRecorderSize must be >= 0, got $flightRecorderSize" }
        require(flightRecorderDir == null || flightRecorderDir.isNotBlank()) { "flightRecorderDir must be a directory path or null, got a blank string" }
        require(!warmUp.isNegative() && warmUp.isFinite()) { "warmUp must be zero (no warm-up) or a positive finite duration, got $warmUp" }
    }

    /** [timeout] as a `java.time.Duration`. */
    public val javaTimeout: java.time.Duration get() = timeout.toJavaDuration()

    /** [warmUp] as a `java.time.Duration` (for Java callers). */
    public val javaWarmUp: java.time.Duration get() = warmUp.toJavaDuration()

    /** A copy with [timeout] taken from a `java.time.Duration`. */
    public fun withTimeout(timeout: java.time.Duration): CommConfig = copy(timeout = timeout.toKotlinDuration())

    /**
     * The deadline every backend gives a creation ([creationTimeout]): [creationTimeout] when set,
     * else the longer of [timeout] and [DEFAULT_CREATION_TIMEOUT].
     */
    public val effectiveCreationTimeout: Duration
        get() = creationTimeout ?: maxOf(timeout, DEFAULT_CREATION_TIMEOUT)

    /** [effectiveCreationTimeout] as a `java.time.Duration` (for Java callers). */
    public val javaEffectiveCreationTimeout: java.time.Duration get() = effectiveCreationTimeout.toJavaDuration()

    /** A builder initialised with this configuration's values. */
    public fun toBuilder(): Builder = Builder(this)

    /** Java-friendly builder: `CommConfig.builder().worldSize(4).timeout(Duration.ofSeconds(30)).build()`. */
    public class Builder internal constructor(private var config: CommConfig) {
        /** Sets [CommConfig.worldSize]. */
        public fun worldSize(value: Int): Builder = apply { config = config.copy(worldSize = value, rank = config.rank.coerceAtMost(value - 1).coerceAtLeast(0)) }

        /** Sets [CommConfig.rank]. */
        public fun rank(value: Int): Builder = apply { config = config.copy(rank = value, localRank = value) }

        /** Sets [CommConfig.localRank]. */
        public fun localRank(value: Int): Builder = apply { config = config.copy(localRank = value) }

        /** Sets [CommConfig.timeout]. */
        public fun timeout(value: java.time.Duration): Builder = apply { config = config.copy(timeout = value.toKotlinDuration()) }

        /** Sets [CommConfig.creationTimeout] (null: the default, see [CommConfig.effectiveCreationTimeout]). */
        public fun creationTimeout(value: java.time.Duration?): Builder = apply { config = config.copy(creationTimeout = value?.toKotlinDuration()) }

        /** Sets [CommConfig.checkConsistency] (null: the backend's default). */
        public fun checkConsistency(value: Boolean?): Builder = apply { config = config.copy(checkConsistency = value) }

        /** Sets [CommConfig.flightRecorderSize]. */
        public fun flightRecorderSize(value: Int): Builder = apply { config = config.copy(flightRecorderSize = value) }

        /** Sets [CommConfig.rendezvous]. */
        public fun rendezvous(value: String?): Builder = apply { config = config.copy(rendezvous = value) }

        /** Sets [CommConfig.flightRecorderDir]. */
        public fun flightRecorderDir(value: String?): Builder = apply { config = config.copy(flightRecorderDir = value) }

        /** Sets [CommConfig.reproducibleReductions]. */
        public fun reproducibleReductions(value: Boolean): Builder = apply { config = config.copy(reproducibleReductions = value) }

        /** Sets [CommConfig.warmUp] (`Duration.ZERO`: none). */
        public fun warmUp(value: java.time.Duration): Builder = apply { config = config.copy(warmUp = value.toKotlinDuration()) }

        /** Adds one backend-specific option. */
        public fun option(key: String, value: String): Builder = apply { config = config.copy(options = config.options + (key to value)) }

        /** The configuration. */
        public fun build(): CommConfig = config
    }

    public companion object {
        /**
         * The shortest creation deadline when [creationTimeout] is not set: 5 minutes (what a world
         * of many ranks may need to start its processes and bootstrap), or [timeout] if longer.
         */
        public val DEFAULT_CREATION_TIMEOUT: Duration = 5.minutes

        private val TRUE_WORDS = setOf("true", "1", "yes", "on")
        private val FALSE_WORDS = setOf("false", "0", "no", "off")

        /** [value] of environment variable [name] as a boolean, refusing anything but the accepted words. */
        private fun boolean(name: String, value: String): Boolean = when (value.trim().lowercase()) {
            in TRUE_WORDS -> true
            in FALSE_WORDS -> false
            else -> throw IllegalArgumentException(
                "environment variable $name=\"$value\" is not a boolean; use one of true, false, 1, 0, yes, no, on, off (any case)",
            )
        }

        /** A builder starting from the defaults. */
        @JvmStatic
        public fun builder(): Builder = Builder(CommConfig())

        /**
         * Rank and world size from the launcher's environment, first match wins:
         * `RANK`/`WORLD_SIZE`/`LOCAL_RANK` (torchrun), `OMPI_COMM_WORLD_RANK`/`_SIZE`/`_LOCAL_RANK`
         * (Open MPI), `PMI_RANK`/`PMI_SIZE` (MPICH's hydra, Intel MPI), `PMIX_RANK` with
         * `OMPI_COMM_WORLD_SIZE`, `SLURM_PROCID`/`SLURM_NTASKS`/`SLURM_LOCALID` (srun). Also
         * `TPCOMM_TIMEOUT_SECONDS`, `TPCOMM_CREATION_TIMEOUT_SECONDS` ([creationTimeout]),
         * `TPCOMM_CHECK_CONSISTENCY`, `TPCOMM_FLIGHT_RECORDER_DIR` ([flightRecorderDir]) and
         * `TPCOMM_WARM_UP_SECONDS` ([warmUp]; decimals allowed, `0` for none). Without any,
         * a world of one.
         *
         * `TPCOMM_CHECK_CONSISTENCY` takes `true`/`false`, `1`/`0`, `yes`/`no` or `on`/`off`, in any case.
         *
         * @throws IllegalArgumentException when a variable is not a number (or, for
         * `TPCOMM_CHECK_CONSISTENCY`, not one of those words) or the rank is out of range; the
         * message names the variable and what it accepts.
         */
        @JvmStatic
        @JvmOverloads
        public fun fromEnvironment(env: Map<String, String> = System.getenv()): CommConfig {
            fun int(name: String): Int? = env[name]?.let {
                it.trim().toIntOrNull() ?: throw IllegalArgumentException("environment variable $name=\"$it\" is not an integer")
            }
            val pairs = listOf(
                Triple("RANK", "WORLD_SIZE", "LOCAL_RANK"),
                Triple("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
                Triple("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
                Triple("PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
                Triple("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
            )
            var config = CommConfig()
            for ((rankVar, sizeVar, localVar) in pairs) {
                val rank = int(rankVar) ?: continue
                val size = int(sizeVar) ?: continue
                require(size >= 1 && rank in 0 until size) {
                    "$rankVar=$rank and $sizeVar=$size are inconsistent: the rank must be in 0 until the size"
                }
                config = CommConfig(worldSize = size, rank = rank, localRank = int(localVar) ?: rank)
                break
            }
            int("TPCOMM_TIMEOUT_SECONDS")?.let {
                require(it > 0) { "TPCOMM_TIMEOUT_SECONDS must be positive, got $it" }
                config = config.copy(timeout = kotlin.time.Duration.parse("${it}s"))
            }
            int("TPCOMM_CREATION_TIMEOUT_SECONDS")?.let {
                require(it > 0) { "TPCOMM_CREATION_TIMEOUT_SECONDS must be positive, got $it" }
                config = config.copy(creationTimeout = kotlin.time.Duration.parse("${it}s"))
            }
            env["TPCOMM_CHECK_CONSISTENCY"]?.let { config = config.copy(checkConsistency = boolean("TPCOMM_CHECK_CONSISTENCY", it)) }
            env["TPCOMM_REPRODUCIBLE"]?.let { config = config.copy(reproducibleReductions = boolean("TPCOMM_REPRODUCIBLE", it)) }
            env["TPCOMM_RENDEZVOUS"]?.let { config = config.copy(rendezvous = it) }
            env["TPCOMM_FLIGHT_RECORDER_DIR"]?.takeIf { it.isNotBlank() }?.let { config = config.copy(flightRecorderDir = it) }
            env["TPCOMM_WARM_UP_SECONDS"]?.let {
                val seconds = it.trim().toDoubleOrNull()
                require(seconds != null && seconds >= 0 && seconds.isFinite()) {
                    "environment variable TPCOMM_WARM_UP_SECONDS=\"$it\" is not a number of seconds >= 0 (decimals allowed, 0 for no warm-up)"
                }
                config = config.copy(warmUp = seconds.toDuration(DurationUnit.SECONDS))
            }
            return config
        }
    }
}
