package dev.tpcomm.gpu

/**
 * The fields of `ncclConfig_t` the engine sets (NVIDIA/nccl `src/nccl.h.in`, ROCm/rccl
 * `src/nccl.h.in`, `ncclConfig_v21700` and later). A null field stays `NCCL_CONFIG_UNDEF_INT`
 * (`INT_MIN`) / `NCCL_CONFIG_UNDEF_PTR`, i.e. the library's default or its environment variable.
 *
 * @property blocking must stay false (the default): init, split and collectives then return
 * `ncclInProgress` instead of blocking the calling thread, so a deadline can abort a communicator
 * that waits for a peer that never comes. [NcclConnector.connect] refuses true with
 * [IllegalArgumentException]: a blocking init runs on the calling thread until every rank joined
 * (NVIDIA/nccl `src/group.cc`:40-44) and could not be abandoned. The price, one host thread per
 * `ncclGroupEnd` with two or more ranks (`src/group.cc`:825-857), is measured in docs/gpu.md.
 * @property minCtas `minCTAs` (NCCL_MIN_CTAS).
 * @property maxCtas `maxCTAs` (NCCL_MAX_CTAS).
 * @property cgaClusterSize `cgaClusterSize` (NCCL_CGA_CLUSTER_SIZE, Hopper and later).
 * @property netName `netName` (NCCL_NET), e.g. `IB` or `Socket`.
 * @property splitShare `splitShare` (NCCL_COMM_SPLIT_SHARE_RESOURCES): children of [commSplit][NcclApi.commSplit] share the parent's resources.
 */
public data class NcclCommConfig(
    public val blocking: Boolean = false,
    public val minCtas: Int? = null,
    public val maxCtas: Int? = null,
    public val cgaClusterSize: Int? = null,
    public val netName: String? = null,
    public val splitShare: Boolean? = null,
) {
    public companion object {
        /** `NCCL_CONFIG_UNDEF_INT` = `INT_MIN`: "not set". */
        public const val UNDEF_INT: Int = Int.MIN_VALUE

        /** `NCCL_API_MAGIC` = 0xcafebeef, the `magic` field of every `ncclConfig_t`. */
        public const val API_MAGIC: Int = 0xcafebeef.toInt()
    }
}
