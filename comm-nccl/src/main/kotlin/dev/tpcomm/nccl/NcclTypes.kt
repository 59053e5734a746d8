package dev.tpcomm.nccl

import dev.tpcomm.DType
import dev.tpcomm.ReduceOp

/**
 * Result codes of the NCCL C API (`ncclResult_t`), shared by RCCL.
 *
 * Values from NVIDIA/nccl `src/nccl.h.in` (master, commit 021e804, NCCL 2.30 line; also the
 * `org.bytedeco.cuda.global.nccl` constants of preset 13.3-9.25-1.5.14, NCCL 2.30.7) and ROCm/rccl
 * `src/nccl.h.in` (commit 8de1783): RCCL defines 0..7 and has no `ncclTimeout`.
 */
public object NcclResult {
    /** `ncclSuccess` = 0. */
    public const val SUCCESS: Int = 0
    /** `ncclUnhandledCudaError` = 1 (a CUDA/HIP call inside the library failed). */
    public const val UNHANDLED_CUDA_ERROR: Int = 1
    /** `ncclSystemError` = 2. */
    public const val SYSTEM_ERROR: Int = 2
    /** `ncclInternalError` = 3. */
    public const val INTERNAL_ERROR: Int = 3
    /** `ncclInvalidArgument` = 4. */
    public const val INVALID_ARGUMENT: Int = 4
    /** `ncclInvalidUsage` = 5. */
    public const val INVALID_USAGE: Int = 5
    /** `ncclRemoteError` = 6 (a peer exited or the network failed; NCCL 2.12+). */
    public const val REMOTE_ERROR: Int = 6
    /** `ncclInProgress` = 7 (non-blocking communicators; NCCL 2.14+). */
    public const val IN_PROGRESS: Int = 7
    /** `ncclTimeout` = 8 (NVIDIA NCCL only). */
    public const val TIMEOUT: Int = 8

    /** The enumerator's name for [code], e.g. `ncclRemoteError`. */
    @JvmStatic
    public fun name(code: Int): String = when (code) {
        SUCCESS -> "ncclSuccess"
        UNHANDLED_CUDA_ERROR -> "ncclUnhandledCudaError"
        SYSTEM_ERROR -> "ncclSystemError"
        INTERNAL_ERROR -> "ncclInternalError"
        INVALID_ARGUMENT -> "ncclInvalidArgument"
        INVALID_USAGE -> "ncclInvalidUsage"
        REMOTE_ERROR -> "ncclRemoteError"
        IN_PROGRESS -> "ncclInProgress"
        TIMEOUT -> "ncclTimeout"
        else -> "ncclResult($code)"
    }

    /** What the user should look at for [code]. */
    @JvmStatic
    public fun hint(code: Int): String = when (code) {
        UNHANDLED_CUDA_ERROR -> "a CUDA/HIP call inside the library failed (driver, out of memory, or a bad device pointer)"
        SYSTEM_ERROR -> "a system call failed (network interfaces, shared memory /dev/shm, ulimits); run with NCCL_DEBUG=INFO"
        INTERNAL_ERROR -> "the library hit an internal check (possibly memory corruption); run with NCCL_DEBUG=INFO"
        INVALID_ARGUMENT -> "an argument was rejected (pointer not device memory, count, dtype or op not supported)"
        INVALID_USAGE -> "calls were made in an order the library does not allow (mismatched collectives or group calls)"
        REMOTE_ERROR -> "a peer rank failed or exited, or the network between ranks broke"
        TIMEOUT -> "the library's own timeout passed"
        else -> "see the library's log (NCCL_DEBUG=WARN)"
    }
}

/**
 * Data type codes (`ncclDataType_t`), identical in NCCL and RCCL.
 *
 * From NVIDIA/nccl `src/nccl.h.in` (commit 021e804) and ROCm/rccl `src/nccl.h.in` (commit 8de1783):
 * int8 0, uint8 1, int32 2, uint32 3, int64 4, uint64 5, float16 6, float32 7, float64 8,
 * bfloat16 9 (NCCL 2.10+). Checked against `org.bytedeco.cuda.global.nccl` in the tests.
 */
public object NcclDataType {
    /** `ncclInt8`. */ public const val INT8: Int = 0
    /** `ncclUint8`. */ public const val UINT8: Int = 1
    /** `ncclInt32`. */ public const val INT32: Int = 2
    /** `ncclUint32`. */ public const val UINT32: Int = 3
    /** `ncclInt64`. */ public const val INT64: Int = 4
    /** `ncclUint64`. */ public const val UINT64: Int = 5
    /** `ncclFloat16`. */ public const val FLOAT16: Int = 6
    /** `ncclFloat32`. */ public const val FLOAT32: Int = 7
    /** `ncclFloat64`. */ public const val FLOAT64: Int = 8
    /** `ncclBfloat16` (NCCL 2.10+). */ public const val BFLOAT16: Int = 9

    /** The code for [dtype]; every tpcomm dtype has one. */
    @JvmStatic
    public fun of(dtype: DType): Int = when (dtype) {
        DType.Int8 -> INT8
        DType.UInt8 -> UINT8
        DType.Int32 -> INT32
        DType.Int64 -> INT64
        DType.Float16 -> FLOAT16
        DType.Float32 -> FLOAT32
        DType.Float64 -> FLOAT64
        DType.BFloat16 -> BFLOAT16
    }

    /** The tpcomm dtype for a code, or null for codes tpcomm does not use (uint32, uint64, fp8). */
    @JvmStatic
    public fun toDType(code: Int): DType? = DType.entries.firstOrNull { of(it) == code }
}

/**
 * Reduction codes (`ncclRedOp_t`): sum 0, prod 1, max 2, min 3, avg 4 (NCCL 2.10+).
 *
 * From NVIDIA/nccl `src/nccl.h.in` (commit 021e804) and ROCm/rccl `src/nccl.h.in` (commit 8de1783).
 * Neither library has bitwise reductions.
 */
public object NcclRedOp {
    /** `ncclSum`. */ public const val SUM: Int = 0
    /** `ncclProd`. */ public const val PROD: Int = 1
    /** `ncclMax`. */ public const val MAX: Int = 2
    /** `ncclMin`. */ public const val MIN: Int = 3
    /** `ncclAvg` (NCCL 2.10+). */ public const val AVG: Int = 4

    /** The code for [op], or null for the bitwise ops, which NCCL and RCCL do not implement. */
    @JvmStatic
    public fun of(op: ReduceOp): Int? = when (op) {
        ReduceOp.Sum -> SUM
        ReduceOp.Product -> PROD
        ReduceOp.Max -> MAX
        ReduceOp.Min -> MIN
        ReduceOp.Avg -> AVG
        ReduceOp.BitwiseAnd, ReduceOp.BitwiseOr, ReduceOp.BitwiseXor -> null
    }
}

/**
 * NCCL version codes as `ncclGetVersion` reports them: `major*10000 + minor*100 + patch` from 2.9 on
 * (`NCCL_VERSION` macro of NVIDIA/nccl `src/nccl.h.in`); RCCL reports the NCCL version it tracks.
 */
public object NcclVersion {
    /** 2.14.0: `ncclCommInitRankConfig`, `ncclConfig_t` and non-blocking communicators; tpcomm's minimum. */
    public const val MINIMUM: Int = 21400
    /** 2.10.0: `ncclAvg` and `ncclBfloat16`. */
    public const val AVG_AND_BFLOAT16: Int = 21000
    /** 2.18.0: `ncclCommSplit`. */
    public const val COMM_SPLIT: Int = 21800
    /** `NCCL_SPLIT_NOCOLOR` = -1. */
    public const val SPLIT_NOCOLOR: Int = -1

    /** `2.18.3` for 21803; also decodes the pre-2.9 form (`2708` is 2.7.8). */
    @JvmStatic
    public fun format(code: Int): String =
        if (code < 10000) "${code / 1000}.${code / 100 % 10}.${code % 100}" else "${code / 10000}.${code / 100 % 100}.${code % 100}"
}
