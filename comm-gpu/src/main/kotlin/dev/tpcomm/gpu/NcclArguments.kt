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
 * creates per call on the native thread.
 */
internal fun redOp(op: ReduceOp, dtype: DType): Int = when {
    op is ReduceOp.PreMulSum -> -1
    dtype == DType.Bool -> if (op == ReduceOp.Product || op == ReduceOp.Min) NcclRedOp.MIN else NcclRedOp.MAX
    else -> NcclRedOp.of(op) ?: throw IllegalStateException("$op on $dtype passed the argument checks but NCCL has no code for it")
}

/** The product of [shape]'s sizes before dimension [d] (1 along dim 0). */
internal fun outerCount(shape: List<Int>, d: Int): Long {
    var o = 1L
    for (i in 0 until d) o *= shape[i]
    return o
}
