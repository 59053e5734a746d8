package dev.tpcomm.gpu

import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.DType

/**
 * Data type codes (`ncclDataType_t`), identical in NCCL and RCCL.
 *
 * From NVIDIA/nccl `src/nccl.h.in` (commit 021e804) and ROCm/rccl `src/nccl.h.in` (commit 8de1783):
 * int8 0, uint8 1, int32 2, uint32 3, int64 4, uint64 5, float16 6, float32 7, float64 8,
 * bfloat16 9 (NCCL 2.10+). Checked against `org.bytedeco.cuda.global.nccl` in the tests.
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

