package dev.tpcomm.coroutines.local

import dev.tpcomm.CommBackendFactory
import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.coroutines.LocalWorld
import dev.tpcomm.spi.CommunicationErrors
import dev.tpcomm.spi.LaunchEnvironment

/**
 * The `local` backend for [dev.tpcomm.Comm.create]: ranks in this JVM. Priority 10, always available.
 *
 * With `config.worldSize == 1` it returns the single rank of a new one-rank world. With a larger
 * world size, the callers that pass the same world name join one world: each of `worldSize`
 * callers (typically threads or coroutines) calls `Comm.create("local", config.copy(rank = r))`
 * with its own rank and gets that rank's communicator. The name is the option
 * `local.world` of [CommConfig.options] (default `"default"`). The first caller creates the world
 * with its config (timeout, flight recorder size); once every rank has joined, the name is free
 * again for a new world. Joining with another world size, or a rank that already joined, throws
 * [IllegalArgumentException]. `create` does not wait for the other ranks: the first collective does.
 *
 * It spans one JVM, so it refuses to serve a process whose environment describes a world of several
 * processes (torchrun's `RANK`/`WORLD_SIZE`, Kubeflow's `PET_*`, `SLURM_NTASKS`, an MPI launcher's
 * world size above 1): [isAvailable] is false there (so `"auto"` never picks it) and [create] throws
 * [dev.tpcomm.BackendUnavailableException] at once, saying so and naming the launch paths that work,
 * instead of building a world of its own in each process that waits for ranks in other JVMs.
 *
 * Like every backend it refuses host tensors over Java heap arrays; the option
 * [ALLOW_HEAP_MEMORY_OPTION] (`local.allowHeapMemory=true`) accepts them for in-process-only programs.
 */
public class LocalBackendFactory internal constructor(private val environment: () -> Map<String, String>) : CommBackendFactory {
    /** The factory `ServiceLoader` creates: it reads the process's environment. */
    public constructor() : this(System::getenv)

    override val name: String get() = "local"
    override val priority: Int get() = 10
    override fun isAvailable(): Boolean = unavailableReason() == null

    override fun unavailableReason(): String? = LaunchEnvironment.read(environment()).localBackendRefusal()

    override suspend fun create(config: CommConfig): Communicator {
        unavailableReason()?.let { throw CommunicationErrors.unavailable(name, it) }
        return if (config.worldSize == 1) LocalWorld(1, config).communicator(0) else LocalWorldRegistry.join(config)
    }

    public companion object {
        /** The option naming the world that callers of `Comm.create("local", ...)` join. */
        public const val WORLD_OPTION: String = "local.world"

        /**
         * The option `local.allowHeapMemory` (`"true"` or `"false"`, default false). By default the
         * in-process backend refuses what every backend refuses, so a program tested on it does not
         * fail later under `mpirun` or on a GPU: a host tensor over a Java heap array
         * (`Tensor.wrap(MemorySegment.ofArray(...))`, or of a heap `ByteBuffer` such as a copy of
         * `NDArray.toByteBuffer()`) fails before any data moves with the [IllegalArgumentException]
         * MPI gives, word for word. With `"true"` the in-process backend, and only it, reduces and
         * copies such tensors (the JVM moves the data, so it can): for programs that only ever run
         * in-process. Applies to every communicator of the world, those split from it included.
         * Any other value makes [LocalWorld]'s constructor and `Comm.create("local", ...)` throw
         * [IllegalArgumentException].
         */
        public const val ALLOW_HEAP_MEMORY_OPTION: String = "local.allowHeapMemory"

        /**
         * The option `local.timing` (`"true"` or `"false"`, default false): whether each rank's flight
         * recorder reads `System.nanoTime` for every call. By default it reads no clock per call, as the
         * MPI backend's does without `mpi.profiling` (two clock reads were about a fifth of an 8-byte
         * all-reduce of 4 ranks on one thread): start times come from the watchdog's scans, accurate to
         * 50 ms (the dumps say so, `clockResolutionMicros`, and the analyzer discounts that much), and
         * an operation that completed has no duration (one that failed, or is still running, has). With
         * `"true"` start times are exact and completed operations carry their durations (a JFR
         * recording times every operation either way). Any other value makes [LocalWorld]'s constructor
         * and `Comm.create("local", ...)` throw [IllegalArgumentException]. Applies to every
         * communicator of the world.
         */
        public const val TIMING_OPTION: String = "local.timing"

        /**
         * The option `local.eagerLimit`: the largest point-to-point message, in bytes, that `send`
         * buffers and returns from before the receiver posts its receive (default
         * [DEFAULT_EAGER_LIMIT]). A larger send to another rank completes only once a matching
         * receive has taken it, as MPI's sends do above their eager limit (a send to the same rank
         * is buffered at any size, as on the MPI backend), so a program that relies on sends being
         * buffered (every rank sends, then receives) deadlocks in its test as it would under
         * `mpirun`, and ends in a [dev.tpcomm.CommunicationTimeoutException] naming this limit.
         * `0` makes every send wait for its receive. A value that is not a non-negative whole number
         * of bytes makes [LocalWorld]'s constructor and `Comm.create("local", ...)` throw
         * [IllegalArgumentException]. Applies to every communicator of the world.
         */
        public const val EAGER_LIMIT_OPTION: String = "local.eagerLimit"

        /**
         * 256 bytes: the strictest of the MPI implementations tpcomm runs on, as measured on
         * one host (docs/mpi.md, "Eager limits"; `scripts/mpi/eager_probe.c`). Open MPI 4.1 (the
         * `vader` shared-memory transport) returns from `MPI_Send` before the receive is posted
         * only up to its `btl_vader_max_inline_send` of 256 bytes; MPICH 4.0 (`ch4:ucx`) up to
         * about 8 KiB.
         */
        public const val DEFAULT_EAGER_LIMIT: Long = 256

        /** [EAGER_LIMIT_OPTION] of [config]; refuses a value that is not a non-negative number of bytes. */
        internal fun eagerLimit(config: CommConfig): Long {
            val value = config.options[EAGER_LIMIT_OPTION] ?: return DEFAULT_EAGER_LIMIT
            val bytes = value.trim().toLongOrNull()
            require(bytes != null && bytes >= 0) {
                "option $EAGER_LIMIT_OPTION=\"$value\" is not a number of bytes; use a whole number >= 0 (default $DEFAULT_EAGER_LIMIT)"
            }
            return bytes
        }

        /** [ALLOW_HEAP_MEMORY_OPTION] of [config]; refuses a value other than true or false. */
        internal fun allowHeapMemory(config: CommConfig): Boolean = booleanOption(config, ALLOW_HEAP_MEMORY_OPTION)

        /** [TIMING_OPTION] of [config]; refuses a value other than true or false. */
        internal fun timing(config: CommConfig): Boolean = booleanOption(config, TIMING_OPTION)

        /** The boolean option [key] of [config] (false when absent); refuses a value other than true or false. */
        private fun booleanOption(config: CommConfig, key: String): Boolean {
            val value = config.options[key] ?: return false
            return when (value.trim().lowercase()) {
                "true" -> true
                "false" -> false
                else -> throw IllegalArgumentException("option $key=\"$value\" is not a boolean; use true or false")
            }
        }
    }
}

/** Worlds being joined through [LocalBackendFactory], by name, until every rank has joined. */
internal object LocalWorldRegistry {
    private class Pending(val world: LocalWorld, val joined: BooleanArray, var count: Int)

    private val pending = HashMap<String, Pending>()

    fun join(config: CommConfig): Communicator {
        val name = config.options[LocalBackendFactory.WORLD_OPTION] ?: "default"
        synchronized(this) {
            var p = pending[name]
            if (p != null && p.world.isAborted) {
                pending.remove(name)
                p = null
            }
            if (p == null) {
                p = Pending(LocalWorld(config.worldSize, config), BooleanArray(config.worldSize), 0)
                pending[name] = p
            }
            require(p.world.worldSize == config.worldSize) {
                "local world '$name' is being joined with worldSize ${p.world.worldSize} but this caller passed ${config.worldSize}; " +
                    "pass the same worldSize on every rank or another '${LocalBackendFactory.WORLD_OPTION}' name"
            }
            require(!p.joined[config.rank]) {
                "rank ${config.rank} already joined local world '$name'; give every caller its own rank in 0 until ${config.worldSize}"
            }
            p.joined[config.rank] = true
            p.count++
            if (p.count == config.worldSize) pending.remove(name)
            return p.world.communicator(config.rank)
        }
    }
}
