package dev.tpcomm.mpi

import dev.tpcomm.DType
import dev.tpcomm.ReduceOp

/**
 * MPICH ABI (MPICH 3.x/4.x, Intel MPI, MVAPICH): handles are `int` constants from MPICH's `mpi.h`.
 */
internal object MpichAbi : MpiAbi {
    override val handleBytes: Int = 4
    override val commWorld: Long = 0x44000000L
    override val commNull: Long = 0x04000000L
    override val requestNull: Long = 0x2c000000L
    override val errorsReturn: Long = 0x54000001L
    override val inPlace: Long = -1L
    override val statusIgnore: Long = 1L
    override val anySource: Int = -2
    override val anyTag: Int = -1
    override val undefined: Int = -32766

    // mpi.h: `#define MPI_TAG_UB 0x64400001`.
    override val tagUbKey: Int = 0x64400001
    override val maxErrorString: Int = 512
    override val statusLayout: StatusLayout = MpichStatusLayout
    override val byteType: Long = 0x4c00010dL
    override val int64Type: Long = 0x4c00083aL
    override val unsignedMinMaxBroken: Boolean = true

    override fun datatype(dtype: DType): Long = when (dtype) {
        DType.Float32 -> 0x4c00040aL
        DType.Float64 -> 0x4c00080bL
        DType.Float16, DType.BFloat16 -> 0x4c00023cL // MPI_UINT16_T
        DType.Int8 -> 0x4c000137L
        DType.UInt8 -> 0x4c00013bL
        DType.Int32 -> 0x4c000439L
        DType.Int64 -> 0x4c00083aL
        DType.UInt32 -> 0x4c00043dL // MPI_UINT32_T
        DType.UInt64 -> 0x4c00083eL // MPI_UINT64_T
        DType.Float8E4M3, DType.Float8E5M2 -> 0x4c00013bL // MPI_UINT8_T
        DType.Int16 -> 0x4c000238L // MPI_INT16_T
        DType.Bool -> 0x4c00013fL // MPI_C_BOOL
    }

    override val logicalAnd: Long = 0x58000005L // MPI_LAND
    override val logicalOr: Long = 0x58000007L // MPI_LOR
    override val logicalXor: Long = 0x58000009L // MPI_LXOR

    override fun op(op: ReduceOp): Long = when (op) {
        ReduceOp.Max -> 0x58000001L
        ReduceOp.Min -> 0x58000002L
        ReduceOp.Sum, ReduceOp.Avg, is ReduceOp.PreMulSum -> 0x58000003L
        ReduceOp.Product -> 0x58000004L
        ReduceOp.BitwiseAnd -> 0x58000006L
        ReduceOp.BitwiseOr -> 0x58000008L
        ReduceOp.BitwiseXor -> 0x5800000aL
    }
}
