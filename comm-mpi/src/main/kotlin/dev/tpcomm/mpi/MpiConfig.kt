package dev.tpcomm.mpi

import dev.tpcomm.CommConfig

/**
 * Settings of the MPI backend. Immutable. Read from [CommConfig.options] (keys `mpi.*`) and the
 * environment (`TPCOMM_MPI_*`) by [from]; options win over the environment.
 *
 * Settings that MPI reads at `MPI_Init_thread` ([threadLevel], the algorithm choices,
 * [environment]) take effect only for the first communicator of the process.
 *
 * @property library path or soname of the MPI library to open; null tries `TPCOMM_MPI_LIBRARY`,
 * then the sonames of the launcher's implementation, then the usual sonames.
 * @property threadLevel thread support requested from `MPI_Init_thread`.
 * @property cudaAware whether device pointers are given to MPI (see [CudaAwareMode]).
 * @property profiling when true every operation's native time is measured and kept in
 * [MpiCommunicator.profile] (count, total and maximum per operation), and the flight recorder
 * records completion times (finished entries then carry `durationMicros`). When false (default)
 * the recorder reads no clock per operation: start times come from the watchdog's scans (every
 * 50 ms, so they are accurate to about that; the dumps state it in `clockResolutionMicros`), and
 * only operations that failed or are still in progress report a duration. That keeps
 * small-message calls cheap (a clock read costs about 20 ns here).
 * @property abortOnTimeout when a call passes its deadline, call `MPI_Abort` so that every rank of
 * the job ends instead of hanging. Default true.
 * @property progress how operations are driven (see [MpiProgress]).
 * @property allReduceAlgorithm forced all-reduce algorithm, translated to the implementation's knob.
 * @property broadcastAlgorithm forced broadcast algorithm.
 * @property allGatherAlgorithm forced all-gather algorithm.
 * @property environment further variables set with libc `setenv` before `MPI_Init_thread`
 * (e.g. `OMPI_MCA_btl` or `MPIR_CVAR_CH4_NETMOD`); they override the algorithm translations.
 * @property callerRunsLimit the largest collective, in bytes (its largest buffer), that runs on the
 * calling thread instead of the communicator's thread when the caller may make the MPI call
 * itself: [MpiProgress.Blocking], the communicator has a thread of its own
 * (`MPI_THREAD_MULTIPLE`), that thread is idle (nothing queued or in progress, so call order is
 * kept), and the caller may be held: no `withTimeout`/`withTimeoutOrNull` around the call (its
 * deadline must be able to fire) and no [dev.tpcomm.coroutines.Overlapping] in its context (the
 * `*Async` functions, `startCollective`, `overlap`, `pipeline` and the Java futures add it, so the
 * code after them runs while the collective is in flight). That saves the two thread hand-offs of
 * a dispatch (most of an 8-byte all-reduce's 10-12 µs from `runBlocking` on this project's 2-core
 * machines, docs/mpi.md "The natural call path"). While such a call runs, its thread is inside MPI:
 * a cancellation from another thread takes effect when MPI returns, and the communicator's own
 * deadline (the watchdog) still ends a call that never completes. Larger calls, and every call
 * when this is 0, are handed to the communicator's thread and suspend the caller. Default 1 MiB.
 */
public data class MpiConfig(
    public val library: String? = null,
    public val threadLevel: MpiThreadLevel = MpiThreadLevel.Multiple,
    public val cudaAware: CudaAwareMode = CudaAwareMode.Auto,
    public val profiling: Boolean = false,
    public val abortOnTimeout: Boolean = true,
    public val progress: MpiProgress = MpiProgress.Auto,
    public val allReduceAlgorithm: MpiAlgorithm = MpiAlgorithm.Auto,
    public val broadcastAlgorithm: MpiAlgorithm = MpiAlgorithm.Auto,
    public val allGatherAlgorithm: MpiAlgorithm = MpiAlgorithm.Auto,
    public val environment: Map<String, String> = emptyMap(),
    public val callerRunsLimit: Long = DEFAULT_CALLER_RUNS_LIMIT,
) {
    init {
        require(callerRunsLimit >= 0) { "MpiConfig: callerRunsLimit must be >= 0 bytes (0 hands every call to the communicator's thread), got $callerRunsLimit" }
        require(!(progress == MpiProgress.Blocking && !abortOnTimeout)) {
            "MpiConfig: progress=Blocking needs abortOnTimeout=true (a blocking MPI call can only be ended by MPI_Abort); " +
                "use progress=NonBlocking or Auto to keep the process alive on timeouts"
        }
    }

    /** The progress mode in effect: [MpiProgress.Auto] resolved from [abortOnTimeout]. */
    public val effectiveProgress: MpiProgress
        get() = when (progress) {
            MpiProgress.Auto -> if (abortOnTimeout) MpiProgress.Blocking else MpiProgress.NonBlocking
            else -> progress
        }

    /**
     * The environment variables this configuration sets before `MPI_Init_thread` on
     * [implementation]: the algorithm knobs, then [environment].
     *
     * @throws IllegalArgumentException when an algorithm does not exist in [implementation].
     */
    public fun initEnvironment(implementation: MpiImplementation): Map<String, String> =
        MpiTuning.environment(
            implementation,
            mapOf(
                MpiTuning.Collective.AllReduce to allReduceAlgorithm,
                MpiTuning.Collective.Broadcast to broadcastAlgorithm,
                MpiTuning.Collective.AllGather to allGatherAlgorithm,
            ),
        ) + environment

    public companion object {
        /** Option key of [library] (environment: `TPCOMM_MPI_LIBRARY`). */
        public const val LIBRARY: String = "mpi.library"

        /** Option key of [threadLevel] (`TPCOMM_MPI_THREAD_LEVEL`): `Single`, `Serialized` or `Multiple`. */
        public const val THREAD_LEVEL: String = "mpi.threadLevel"

        /** Option key of [cudaAware] (`TPCOMM_MPI_CUDA_AWARE`): `Auto`, `Enabled` or `Disabled`. */
        public const val CUDA_AWARE: String = "mpi.cudaAware"

        /** Option key of [profiling] (`TPCOMM_MPI_PROFILING`): true or false. */
        public const val PROFILING: String = "mpi.profiling"

        /** Option key of [abortOnTimeout] (`TPCOMM_MPI_ABORT_ON_TIMEOUT`): true or false. */
        public const val ABORT_ON_TIMEOUT: String = "mpi.abortOnTimeout"

        /** Option key of [progress] (`TPCOMM_MPI_PROGRESS`): `Auto`, `Blocking` or `NonBlocking`. */
        public const val PROGRESS: String = "mpi.progress"

        /** Option key of [allReduceAlgorithm] (`TPCOMM_MPI_ALLREDUCE_ALGORITHM`): an [MpiAlgorithm] name. */
        public const val ALLREDUCE_ALGORITHM: String = "mpi.algorithm.allReduce"

        /** Option key of [broadcastAlgorithm] (`TPCOMM_MPI_BCAST_ALGORITHM`): an [MpiAlgorithm] name. */
        public const val BROADCAST_ALGORITHM: String = "mpi.algorithm.broadcast"

        /** Option key of [allGatherAlgorithm] (`TPCOMM_MPI_ALLGATHER_ALGORITHM`): an [MpiAlgorithm] name. */
        public const val ALLGATHER_ALGORITHM: String = "mpi.algorithm.allGather"

        /** Option key of [callerRunsLimit] (`TPCOMM_MPI_CALLER_RUNS_LIMIT`): bytes, `0` to hand every call over. */
        public const val CALLER_RUNS_LIMIT: String = "mpi.callerRunsLimit"

        /** The default [callerRunsLimit]: 1 MiB. */
        public const val DEFAULT_CALLER_RUNS_LIMIT: Long = 1L shl 20

        /** Prefix of options copied verbatim into [environment]: `mpi.env.OMPI_MCA_btl=self,vader`. */
        public const val ENV_PREFIX: String = "mpi.env."

        private val envNames = mapOf(
            LIBRARY to "TPCOMM_MPI_LIBRARY",
            THREAD_LEVEL to "TPCOMM_MPI_THREAD_LEVEL",
            CUDA_AWARE to "TPCOMM_MPI_CUDA_AWARE",
            PROFILING to "TPCOMM_MPI_PROFILING",
            ABORT_ON_TIMEOUT to "TPCOMM_MPI_ABORT_ON_TIMEOUT",
            PROGRESS to "TPCOMM_MPI_PROGRESS",
            ALLREDUCE_ALGORITHM to "TPCOMM_MPI_ALLREDUCE_ALGORITHM",
            BROADCAST_ALGORITHM to "TPCOMM_MPI_BCAST_ALGORITHM",
            ALLGATHER_ALGORITHM to "TPCOMM_MPI_ALLGATHER_ALGORITHM",
            CALLER_RUNS_LIMIT to "TPCOMM_MPI_CALLER_RUNS_LIMIT",
        )

        /** The environment variable read for option [key], e.g. `TPCOMM_MPI_LIBRARY` for [LIBRARY]. */
        @JvmStatic
        public fun environmentVariable(key: String): String? = envNames[key]

        /**
         * The MPI settings from [options] (see the keys above), falling back to [env].
         *
         * @throws IllegalArgumentException naming the key and the accepted values when a value is invalid.
         */
        @JvmStatic
        @JvmOverloads
        public fun from(options: Map<String, String>, env: Map<String, String> = System.getenv()): MpiConfig {
            fun value(key: String): String? = options[key] ?: envNames[key]?.let { env[it] }?.takeIf { it.isNotBlank() }
            fun bool(key: String, default: Boolean): Boolean = when (val v = value(key)?.trim()?.lowercase()) {
                null -> default
                "1", "true", "yes", "on" -> true
                "0", "false", "no", "off" -> false
                else -> throw IllegalArgumentException("$key (${envNames[key]}) must be true or false, got \"$v\"")
            }
            fun <E : Enum<E>> enum(key: String, values: Array<E>, default: E): E {
                val v = value(key)?.trim() ?: return default
                return values.firstOrNull { it.name.equals(v, ignoreCase = true) }
                    ?: throw IllegalArgumentException("$key (${envNames[key]}) must be one of ${values.joinToString()}, got \"$v\"")
            }
            return MpiConfig(
                library = value(LIBRARY),
                threadLevel = enum(THREAD_LEVEL, MpiThreadLevel.entries.toTypedArray(), MpiThreadLevel.Multiple),
                cudaAware = enum(CUDA_AWARE, CudaAwareMode.entries.toTypedArray(), CudaAwareMode.Auto),
                profiling = bool(PROFILING, false),
                abortOnTimeout = bool(ABORT_ON_TIMEOUT, true),
                progress = enum(PROGRESS, MpiProgress.entries.toTypedArray(), MpiProgress.Auto),
                allReduceAlgorithm = enum(ALLREDUCE_ALGORITHM, MpiAlgorithm.entries.toTypedArray(), MpiAlgorithm.Auto),
                broadcastAlgorithm = enum(BROADCAST_ALGORITHM, MpiAlgorithm.entries.toTypedArray(), MpiAlgorithm.Auto),
                allGatherAlgorithm = enum(ALLGATHER_ALGORITHM, MpiAlgorithm.entries.toTypedArray(), MpiAlgorithm.Auto),
                environment = options.filterKeys { it.startsWith(ENV_PREFIX) }.mapKeys { it.key.removePrefix(ENV_PREFIX) },
                callerRunsLimit = value(CALLER_RUNS_LIMIT)?.trim()?.let { v ->
                    v.toLongOrNull()?.takeIf { it >= 0 }
                        ?: throw IllegalArgumentException("$CALLER_RUNS_LIMIT (TPCOMM_MPI_CALLER_RUNS_LIMIT) must be a number of bytes >= 0, got \"$v\"")
                } ?: DEFAULT_CALLER_RUNS_LIMIT,
            )
        }
    }
}

/** Thread support requested from `MPI_Init_thread` (`MPI_THREAD_*`). */
public enum class MpiThreadLevel(
    /** The `MPI_THREAD_*` value (the same in Open MPI and MPICH). */
    public val value: Int,
) {
    /**
     * `MPI_THREAD_SINGLE`: MPI is initialised without thread support, and tpcomm makes every MPI
     * call of the process (`MPI_Init_thread` and `MPI_Finalize` included) from one dedicated
     * thread shared by all communicators, so MPI only ever sees that thread. The fastest level:
     * Open MPI turns its internal locking on for every level above this one, which costs about
     * 0.1 µs per small call. As with [Serialized], blocking collectives on different communicators
     * run one after the other, so every rank must issue them in the same order
     * ([MpiProgress.NonBlocking] lifts that). Other native code of the process must not call MPI.
     */
    Single(0),

    /**
     * `MPI_THREAD_SERIALIZED`: every communicator of the process calls MPI from one shared thread
     * (the one that initialised MPI). Blocking collectives on different communicators run one after
     * the other, so every rank must issue them in the same order; [MpiProgress.NonBlocking] lifts
     * that. MPICH skips its locking at this level; Open MPI does not (see [Single]).
     */
    Serialized(2),

    /**
     * `MPI_THREAD_MULTIPLE`: every communicator has its own thread, so collectives on different
     * communicators never wait for one another. Default.
     */
    Multiple(3),
}

/** Whether the backend hands device pointers to MPI. */
public enum class CudaAwareMode {
    /** Use device pointers when the library reports CUDA support (`MPIX_Query_cuda_support`). */
    Auto,

    /** Always pass device pointers (the user knows the library is CUDA-aware). */
    Enabled,

    /**
     * Never pass device pointers: device tensors are staged through host memory with the
     * [dev.tpcomm.spi.DeviceStaging] registered for their device, or refused when there is none.
     */
    Disabled,
}

/** How the backend drives MPI operations on the communicator's thread. */
public enum class MpiProgress {
    /** [Blocking] when [MpiConfig.abortOnTimeout] is true, else [NonBlocking]. */
    Auto,

    /**
     * Collectives run as blocking MPI calls (`MPI_Allreduce`, ...) on the communicator's thread,
     * one after another in call order, overlapping the caller's compute. Same speed as C; a
     * watchdog enforces the deadline with `MPI_Abort`. Point-to-point calls are always non-blocking.
     */
    Blocking,

    /**
     * Every call is non-blocking (`MPI_Iallreduce`, `MPI_Isend`, ...) and polled with `MPI_Test`,
     * so several are in flight at once; a missed deadline fails the call without ending the
     * process (unless [MpiConfig.abortOnTimeout]). Open MPI's non-blocking collectives are
     * slower than its blocking ones (docs/mpi.md gives the figures).
     */
    NonBlocking,
}
