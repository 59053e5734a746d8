package dev.tpcomm.nccl

import dev.tpcomm.gpu.NativeEnvironment

/**
 * NCCL settings, each mapped to the environment variable NCCL itself reads (NCCL's documentation,
 * "Environment Variables"). [CommConfig.options][dev.tpcomm.CommConfig.options] keys are `nccl.<name>`:
 * `nccl.debug`, `nccl.debugSubsys`, `nccl.algo`, `nccl.proto`, `nccl.socketIfname`, `nccl.ibDisable`,
 * `nccl.p2pDisable`, `nccl.minChannels`, `nccl.maxChannels`, `nccl.buffsize`, `nccl.device`, and
 * `nccl.env.<VAR>` for any other variable, passed as is.
 *
 * NCCL reads its variables once, at its first initialisation in the process; [apply] sets them with
 * libc `setenv` before that (a variable the user already exported is kept unless [overwrite]).
 *
 * @property debug NCCL_DEBUG: `VERSION`, `WARN`, `INFO`, `TRACE`.
 * @property debugSubsys NCCL_DEBUG_SUBSYS, e.g. `INIT,COLL`.
 * @property algo NCCL_ALGO, e.g. `Ring`, `Tree`, `Ring,Tree`.
 * @property proto NCCL_PROTO: `LL`, `LL128`, `Simple`.
 * @property socketIfname NCCL_SOCKET_IFNAME, e.g. `eth0` or `^docker`.
 * @property ibDisable NCCL_IB_DISABLE=1 forces the socket transport.
 * @property p2pDisable NCCL_P2P_DISABLE=1 disables direct GPU-to-GPU transport.
 * @property minChannels NCCL_MIN_NCHANNELS.
 * @property maxChannels NCCL_MAX_NCHANNELS.
 * @property bufferSize NCCL_BUFFSIZE in bytes.
 * @property device CUDA device index for this rank (default: [CommConfig.localRank][dev.tpcomm.CommConfig.localRank]).
 * @property extra further variables, passed as is.
 * @property overwrite replace variables the user already exported.
 */
public data class NcclEnvironment(
    public val debug: String? = null,
    public val debugSubsys: String? = null,
    public val algo: String? = null,
    public val proto: String? = null,
    public val socketIfname: String? = null,
    public val ibDisable: Boolean? = null,
    public val p2pDisable: Boolean? = null,
    public val minChannels: Int? = null,
    public val maxChannels: Int? = null,
    public val bufferSize: Long? = null,
    public val device: Int? = null,
    public val extra: Map<String, String> = emptyMap(),
    public val overwrite: Boolean = false,
) {
    init {
        minChannels?.let { require(it >= 1) { "nccl.minChannels must be >= 1, got $it" } }
        maxChannels?.let { require(it >= 1) { "nccl.maxChannels must be >= 1, got $it" } }
        if (minChannels != null && maxChannels != null) require(minChannels <= maxChannels) { "nccl.minChannels $minChannels exceeds nccl.maxChannels $maxChannels" }
        bufferSize?.let { require(it > 0) { "nccl.buffsize must be positive, got $it" } }
        device?.let { require(it >= 0) { "nccl.device must be >= 0, got $it" } }
    }

    /** The variables this configuration sets, by name. */
    public fun environment(): Map<String, String> = buildMap {
        debug?.let { put("NCCL_DEBUG", it) }
        debugSubsys?.let { put("NCCL_DEBUG_SUBSYS", it) }
        algo?.let { put("NCCL_ALGO", it) }
        proto?.let { put("NCCL_PROTO", it) }
        socketIfname?.let { put("NCCL_SOCKET_IFNAME", it) }
        ibDisable?.let { put("NCCL_IB_DISABLE", if (it) "1" else "0") }
        p2pDisable?.let { put("NCCL_P2P_DISABLE", if (it) "1" else "0") }
        minChannels?.let { put("NCCL_MIN_NCHANNELS", it.toString()) }
        maxChannels?.let { put("NCCL_MAX_NCHANNELS", it.toString()) }
        bufferSize?.let { put("NCCL_BUFFSIZE", it.toString()) }
        putAll(extra)
    }

    /** Sets [environment] in the C environment (see [NativeEnvironment]). */
    public fun apply() {
        for ((k, v) in environment()) NativeEnvironment.set(k, v, overwrite)
    }

    public companion object {
        /**
         * Reads the `nccl.*` keys of [options]; other keys are ignored.
         *
         * @throws IllegalArgumentException for an unknown `nccl.` key or a value of the wrong form.
         */
        @JvmStatic
        public fun fromOptions(options: Map<String, String>): NcclEnvironment {
            var c = NcclEnvironment()
            val extra = LinkedHashMap<String, String>()
            for ((key, value) in options) {
                if (!key.startsWith("nccl.")) continue
                val k = key.removePrefix("nccl.")
                fun int() = value.trim().toIntOrNull() ?: throw IllegalArgumentException("option $key=\"$value\" must be an integer")
                fun bool() = when (value.trim().lowercase()) {
                    "1", "true", "yes" -> true
                    "0", "false", "no" -> false
                    else -> throw IllegalArgumentException("option $key=\"$value\" must be true or false")
                }
                c = when (k) {
                    "debug" -> c.copy(debug = value)
                    "debugSubsys" -> c.copy(debugSubsys = value)
                    "algo" -> c.copy(algo = value)
                    "proto" -> c.copy(proto = value)
                    "socketIfname" -> c.copy(socketIfname = value)
                    "ibDisable" -> c.copy(ibDisable = bool())
                    "p2pDisable" -> c.copy(p2pDisable = bool())
                    "minChannels" -> c.copy(minChannels = int())
                    "maxChannels" -> c.copy(maxChannels = int())
                    "buffsize" -> c.copy(bufferSize = value.trim().toLongOrNull() ?: throw IllegalArgumentException("option $key=\"$value\" must be a byte count"))
                    "device" -> c.copy(device = int())
                    "overwrite" -> c.copy(overwrite = bool())
                    else -> if (k.startsWith("env.") && k.length > 4) {
                        extra[k.removePrefix("env.")] = value; c
                    } else {
                        throw IllegalArgumentException(
                            "unknown option $key; known: nccl.debug, nccl.debugSubsys, nccl.algo, nccl.proto, nccl.socketIfname, nccl.ibDisable, " +
                                "nccl.p2pDisable, nccl.minChannels, nccl.maxChannels, nccl.buffsize, nccl.device, nccl.overwrite, nccl.env.<VAR>",
                        )
                    }
                }
            }
            return c.copy(extra = extra)
        }
    }
}
