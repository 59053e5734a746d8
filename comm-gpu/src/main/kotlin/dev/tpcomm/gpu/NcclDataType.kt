package dev.tpcomm.gpu

import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.DType

/**
 * Data type codes (`ncclDataType_t`), identical in NCCL and RCCL.
 *
 * From NVIDIA/nccl `src/nccl.h.in` (commit 021e804; `ncclFloat8e4m3`/`ncclFloat8e5m2` since 2.24.3,
 * commit 6aae379) and ROCm/rccl `src/nccl.h.in` (commit 8de1783; there `ncclFp8E4M3`/`ncclFp8E5M2`):
 * int8 0, uint8 1, int32 2, uint32 3, int64 4, uint64 5, float16 6, float32 7, float64 8,
 * bfloat16 9 (NCCL 2.10+), float8e4m3 10 and float8e5m2 11 (NCCL 2.24+). Checked against
 * `org.bytedeco.cuda.global.nccl` in the tests.
 */
@InternalTpcommApi
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
    /** `ncclFloat8e4m3` (NCCL 2.24+): CUDA's `__nv_fp8_e4m3`, OCP E4M3FN. */ public const val FLOAT8E4M3: Int = 10
    /** `ncclFloat8e5m2` (NCCL 2.24+): CUDA's `__nv_fp8_e5m2`. */ public const val FLOAT8E5M2: Int = 11

    /** 2.24.0: the first NCCL with `ncclFloat8e4m3` and `ncclFloat8e5m2` (2.24.3-1). */
    public const val FLOAT8_VERSION: Int = 22400

    /**
     * The code NCCL reduces [dtype] as, or null where NCCL has none (Int16: reductions are refused,
     * data movement goes as bytes). Bool is `ncclUint8`, as in PyTorch (pytorch/pytorch
     * `torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp`, `ncclDataType` map: `{at::kBool, ncclUint8}`),
     * reduced with `ncclMax` for Sum/Max and `ncclMin` for Product/Min (`getNcclReduceOp`).
     */
    @JvmStatic
    public fun of(dtype: DType): Int? = when (dtype) {
        DType.Int8 -> INT8
        DType.UInt8, DType.Bool -> UINT8
        DType.Int32 -> INT32
        DType.UInt32 -> UINT32
        DType.Int64 -> INT64
        DType.UInt64 -> UINT64
        DType.Float16 -> FLOAT16
        DType.Float32 -> FLOAT32
        DType.Float64 -> FLOAT64
        DType.BFloat16 -> BFLOAT16
        DType.Float8E4M3 -> FLOAT8E4M3
        DType.Float8E5M2 -> FLOAT8E5M2
        DType.Int16 -> null
    }

    /** The oldest NCCL version (as `ncclGetVersion` reports it) that has [dtype]'s code: 2.10 for bfloat16, 2.24 for FP8, else 0. */
    @JvmStatic
    public fun minimumVersion(dtype: DType): Int = when (dtype) {
        DType.BFloat16 -> NcclVersion.AVG_AND_BFLOAT16
        DType.Float8E4M3, DType.Float8E5M2 -> FLOAT8_VERSION
        else -> 0
    }

    /** The tpcomm dtype for a code (`ncclUint8` is UInt8), or null for codes outside 0..11. */
    @JvmStatic
    public fun toDType(code: Int): DType? = DType.entries.firstOrNull { of(it) == code }
}
