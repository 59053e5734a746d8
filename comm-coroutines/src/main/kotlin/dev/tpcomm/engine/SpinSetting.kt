package dev.tpcomm.engine

import dev.tpcomm.InternalTpcommApi

/**
 * How long a thread of the library spins before it parks or suspends, from an environment variable
 * in microseconds (`TPCOMM_GPU_IDLE_SPIN_US`, `TPCOMM_GPU_CALLER_SPIN_US`, `TPCOMM_MPI_HANDOFF_SPIN_US`):
 * read once, where the setting is declared. One parse for all of them, so every spin setting
 * accepts the same values: a whole number of microseconds from 0 to [MAX_MICROS] (larger values
 * are clamped to it, negative ones to 0); unset, empty or not a number gives the default.
 */
@InternalTpcommApi
public object SpinSetting {
    /** The longest spin any setting accepts, in microseconds (10 ms): past it a parked thread costs less than the spin. */
    public const val MAX_MICROS: Long = 10_000L

    /** [value] (microseconds, as text; null when unset) as nanoseconds, or [defaultMicros] as nanoseconds when it is not a number. */
    public fun nanos(value: String?, defaultMicros: Long): Long =
        (value?.trim()?.toLongOrNull()?.coerceIn(0L, MAX_MICROS) ?: defaultMicros) * 1_000L

    /** [nanos] of the environment variable [name]. */
    public fun fromEnvironment(name: String, defaultMicros: Long): Long = nanos(System.getenv(name), defaultMicros)
}
