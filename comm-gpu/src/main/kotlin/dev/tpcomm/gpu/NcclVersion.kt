package dev.tpcomm.gpu

import dev.tpcomm.InternalTpcommApi

/**
 * NCCL version codes as `ncclGetVersion` reports them: `major*10000 + minor*100 + patch` from 2.9 on
 * (`NCCL_VERSION` macro of NVIDIA/nccl `src/nccl.h.in`); RCCL reports the NCCL version it tracks.
 */
@InternalTpcommApi
public object NcclVersion {
    /**
     * 2.18.0, tpcomm's minimum (ROCm 6.0's RCCL reports 2.18.3): `ncclCommSplit` (2.18), and none of
     * 2.14-2.17's non-blocking init reading the caller's `ncclComm_t*` from its job thread.
     */
    public const val MINIMUM: Int = 21800
    /** 2.10.0: `ncclAvg` and `ncclBfloat16`. */
    public const val AVG_AND_BFLOAT16: Int = 21000
    /** 2.18.0: `ncclCommSplit`. */
    public const val COMM_SPLIT: Int = 21800
    /** `NCCL_SPLIT_NOCOLOR` = -1. */
    public const val SPLIT_NOCOLOR: Int = -1

    /**
     * Throws [dev.tpcomm.BackendUnavailableException] for [backend] when [code] is older than [MINIMUM],
     * saying what was found and what to install.
     */
    @JvmStatic
    public fun requireSupported(libraryName: String, code: Int, backend: String) {
        if (code >= MINIMUM) return
        throw dev.tpcomm.spi.CommunicationErrors.unavailable(
            backend,
            "$libraryName ${format(code)} is too old: tpcomm needs NCCL 2.18 or later (ROCm 6.0 or later for RCCL), " +
                "for ncclCommSplit and a non-blocking init that does not read the caller's out-pointer later; upgrade the library",
        )
    }

    /** `2.18.3` for 21803; also decodes the pre-2.9 form (`2708` is 2.7.8). */
    @JvmStatic
    public fun format(code: Int): String =
        if (code < 10000) "${code / 1000}.${code / 100 % 10}.${code % 100}" else "${code / 10000}.${code / 100 % 100}.${code % 100}"
}
