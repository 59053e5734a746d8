package dev.tpcomm.gpu

import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor

// How a call's arguments become NCCL's: data types, reduction codes, counts. Stateless functions.

/** Point-to-point messages move bytes (`ncclUint8`), so any dtypes of equal byte size match. */
internal const val BYTES: Int = NcclDataType.UINT8

/** The `ncclDataType_t` a reduction of [t] uses; the validator refused the dtypes without one ([NcclLimits.reductionRefusal]). */
internal fun dt(t: Tensor): Int = NcclDataType.of(t.dtype) ?: throw IllegalStateException("${t.dtype} has no NCCL type; the validator refuses it")

/** The type data movement uses: [t]'s own where the library ([libraryVersionCode]) has it, else bytes ([moveCount] then counts bytes). */
internal fun moveTypeFor(t: Tensor, libraryVersionCode: Int): Int =
    NcclDataType.of(t.dtype)?.takeIf { libraryVersionCode >= NcclDataType.minimumVersion(t.dtype) } ?: BYTES

/** The element count for [type]: bytes when [moveTypeFor] fell back to bytes. */
internal fun moveCount(t: Tensor, type: Int): Long = if (type == BYTES) t.byteSize else t.numel

/**
 * The `ncclRedOp_t` code of [op] on [dtype], which the validator accepted ([NcclLimits.reductionRefusal]):
 * Bool is reduced as uint8 with max (Sum, Max: a logical or) and min (Product, Min: a logical and), as
 * PyTorch's `getNcclReduceOp` does. Returns -1 for [ReduceOp.PreMulSum], whose operator [NcclOp.withRedOp]
 * creates per call on the native thread. [worldSize] is the communicator's: FP8 Avg on one rank is
 * issued as Sum (see the case below).
 */
internal fun redOp(op: ReduceOp, dtype: DType, worldSize: Int): Int = when {
    op is ReduceOp.PreMulSum -> -1
    // On a communicator of one rank NCCL turns Avg on floating point into a PreMulSum by 1/1 and hands
    // it to ncclLaunchOneRank, whose FP8 kernels are compiled only under `__CUDA_ARCH__ >= 900`, a
    // device-side macro that is never defined in that host function: FP8 falls to `default: return
    // ncclInvalidArgument` (NVIDIA/nccl src/device/onerank.cu `ncclLaunchOneRank`, from v2.24.3-1, the
    // first with FP8, to v2.30.7-1; src/enqueue.cc `taskAppend` and `hostToDevRedOp`; seen on an H200
    // with NCCL 2.28.9 as "enqueue.cc:2570 -> 4"). The average of one value is that value, bit for
    // bit, and so is a sum of one rank (a copy, or nothing in place): issue it as Sum.
    op == ReduceOp.Avg && worldSize == 1 && (dtype == DType.Float8E4M3 || dtype == DType.Float8E5M2) -> NcclRedOp.SUM
    dtype == DType.Bool -> if (op == ReduceOp.Product || op == ReduceOp.Min) NcclRedOp.MIN else NcclRedOp.MAX
    else -> NcclRedOp.of(op) ?: throw IllegalStateException("$op on $dtype passed the argument checks but NCCL has no code for it")
}

/** The product of [shape]'s sizes before dimension [d] (1 along dim 0). */
internal fun outerCount(shape: List<Int>, d: Int): Long {
    var o = 1L
    for (i in 0 until d) o *= shape[i]
    return o
}
