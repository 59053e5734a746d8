package dev.tpcomm.gpu

import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.ReduceOp

/**
 * Reduction codes (`ncclRedOp_t`): sum 0, prod 1, max 2, min 3, avg 4 (NCCL 2.10+); operators
 * made by `ncclRedOpCreatePreMulSum` get codes from [NUM_OPS] on (per communicator).
 *
 * From NVIDIA/nccl `src/nccl.h.in` (commit 021e804) and ROCm/rccl `src/nccl.h.in` (commit 8de1783).
 * Neither library has bitwise reductions.
 */
@InternalTpcommApi
public object NcclRedOp {
    /** `ncclSum`. */ public const val SUM: Int = 0
    /** `ncclProd`. */ public const val PROD: Int = 1
    /** `ncclMax`. */ public const val MAX: Int = 2
    /** `ncclMin`. */ public const val MIN: Int = 3
    /** `ncclAvg` (NCCL 2.10+). */ public const val AVG: Int = 4
    /** `ncclNumOps`: the first code of a user-created operator (`ncclRedOpCreatePreMulSum`). */ public const val NUM_OPS: Int = 5

    /** `ncclScalarDevice`: the PreMulSum scalar is device memory, read while the collective runs. */ public const val SCALAR_DEVICE: Int = 0
    /** `ncclScalarHostImmediate`: the PreMulSum scalar is host memory, read before `ncclRedOpCreatePreMulSum` returns. */ public const val SCALAR_HOST_IMMEDIATE: Int = 1

    /**
     * The built-in code for [op]; null for the bitwise ops, which NCCL and RCCL do not implement,
     * and for [ReduceOp.PreMulSum], an operator created per call with `ncclRedOpCreatePreMulSum`.
     */
    @JvmStatic
    public fun of(op: ReduceOp): Int? = when (op) {
        ReduceOp.Sum -> SUM
        ReduceOp.Product -> PROD
        ReduceOp.Max -> MAX
        ReduceOp.Min -> MIN
        ReduceOp.Avg -> AVG
        ReduceOp.BitwiseAnd, ReduceOp.BitwiseOr, ReduceOp.BitwiseXor -> null
        is ReduceOp.PreMulSum -> null
    }
}

