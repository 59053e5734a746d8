package dev.tpcomm.rccl

import dev.tpcomm.gpu.NativeEnvironment

/**
 * RCCL settings, each mapped to an environment variable RCCL really reads (RCCL keeps NCCL's
 * names), set with libc `setenv` before RCCL initialises ([apply]). [CommConfig.options][dev.tpcomm.CommConfig.options]
 * keys are `rccl.<name>`.
 *
 * | option | variable | note |
 * | --- | --- | --- |
 * | `rccl.algorithm` = `ring` / `tree` | `NCCL_ALGO=Ring` / `Tree` | restricts the algorithm; tree exists for all-reduce only, so other collectives keep using ring |
 * | `rccl.channels` = N | `NCCL_MIN_NCHANNELS=N`, `NCCL_MAX_NCHANNELS=N` | there is no "exactly N channels" knob: both bounds are set, and RCCL may still use fewer when its topology search finds fewer |
 * | `rccl.debug` = `VERSION`/`WARN`/`INFO`/`TRACE` | `NCCL_DEBUG` | |
 * | `rccl.bufferSize` = bytes | `NCCL_BUFFSIZE` | per-channel buffer |
 * | `rccl.device` = index | (none) | the HIP device of this rank; default `CommConfig.localRank` |
 * | `rccl.env.VAR` = value | `VAR` | any other variable, as is |
 *
 * A variable the user already exported is kept unless [overwrite] (`rccl.overwrite=true`).
 *
 * @property algorithm `NCCL_ALGO`; null leaves RCCL's choice.
 * @property channels both `NCCL_MIN_NCHANNELS` and `NCCL_MAX_NCHANNELS`; null leaves RCCL's choice.
 * @property debug `NCCL_DEBUG` level.
 * @property bufferSize `NCCL_BUFFSIZE`, bytes per channel.
 * @property device the HIP device of this rank; null uses `CommConfig.localRank`.
 * @property extra further variables, passed as is.
 * @property overwrite replace variables the user already exported.
 */
public data class RcclEnvironment(
    public val algorithm: Algorithm? = null,
    public val channels: Int? = null,
    public val debug: String? = null,
    public val bufferSize: Long? = null,
    public val device: Int? = null,
    public val extra: Map<String, String> = emptyMap(),
    public val overwrite: Boolean = false,
) {
    /** The algorithms `NCCL_ALGO` selects, by the names RCCL parses. */
    public enum class Algorithm(
        /** The value written to `NCCL_ALGO`. */
        public val envValue: String,
    ) { Ring("Ring"), Tree("Tree") }

    init {
        channels?.let { require(it in 1..64) { "rccl.channels must be in 1..64, got $it" } }
        bufferSize?.let { require(it > 0) { "rccl.bufferSize must be positive, got $it" } }
        device?.let { require(it >= 0) { "rccl.device must be >= 0, got $it" } }
        debug?.let { require(it.uppercase() in DEBUG_LEVELS) { "rccl.debug must be one of $DEBUG_LEVELS, got $it" } }
    }

    /** The variables this configuration sets. */
    public fun environment(): Map<String, String> = buildMap {
        algorithm?.let { put("NCCL_ALGO", it.envValue) }
        channels?.let {
            put("NCCL_MIN_NCHANNELS", it.toString())
            put("NCCL_MAX_NCHANNELS", it.toString())
        }
        debug?.let { put("NCCL_DEBUG", it.uppercase()) }
        bufferSize?.let { put("NCCL_BUFFSIZE", it.toString()) }
        putAll(extra)
    }

    /** Sets [environment] in the C environment. Call before RCCL initialises (the factory does). */
    public fun apply() {
        for ((k, v) in environment()) NativeEnvironment.set(k, v, overwrite)
    }

    public companion object {
        private val DEBUG_LEVELS = listOf("VERSION", "WARN", "INFO", "TRACE")

        /**
         * Reads the `rccl.*` keys of [options]; other keys are ignored.
         *
         * @throws IllegalArgumentException for an unknown `rccl.` key or a malformed value.
         */
        @JvmStatic
        public fun fromOptions(options: Map<String, String>): RcclEnvironment {
            var c = RcclEnvironment()
            val extra = LinkedHashMap<String, String>()
            for ((key, value) in options) {
                if (!key.startsWith("rccl.")) continue
                val k = key.removePrefix("rccl.")
                fun long(): Long = value.trim().toLongOrNull() ?: throw IllegalArgumentException("option $key=\"$value\" must be an integer")
                c = when (k) {
                    "algorithm" -> c.copy(
                        algorithm = Algorithm.entries.firstOrNull { it.name.equals(value.trim(), ignoreCase = true) }
                            ?: throw IllegalArgumentException("option $key=\"$value\" must be ring or tree"),
                    )
                    "channels" -> c.copy(channels = long().toInt())
                    "debug" -> c.copy(debug = value.trim())
                    "bufferSize" -> c.copy(bufferSize = long())
                    "device" -> c.copy(device = long().toInt())
                    "overwrite" -> c.copy(overwrite = value.trim().equals("true", ignoreCase = true) || value.trim() == "1")
                    else -> if (k.startsWith("env.") && k.length > 4) {
                        extra[k.removePrefix("env.")] = value; c
                    } else {
                        throw IllegalArgumentException("unknown option $key; known: rccl.algorithm, rccl.channels, rccl.debug, rccl.bufferSize, rccl.device, rccl.overwrite, rccl.env.<VAR>")
                    }
                }
            }
            return c.copy(extra = extra)
        }
    }
}
