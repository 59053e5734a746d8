package dev.tpcomm.mpi

import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import java.lang.foreign.ValueLayout

/**
 * What the loaded MPI library gets wrong, and how [MpiCommunicator] works around it (decided from
 * the [MpiAbi] flags, which name the implementation and version that need them).
 */
internal class MpiWorkarounds(private val abi: MpiAbi) {
    /** MPICH 4.0 compares unsigned 8-bit values as signed in MPI_MIN/MPI_MAX: reduce them as Int8 with the top bit flipped. */
    fun flipsUnsignedBytes(t: Tensor, op: ReduceOp): Boolean =
        abi.unsignedByteMinMaxBroken && t.dtype == DType.UInt8 && (op == ReduceOp.Min || op == ReduceOp.Max) && !t.device.isGpu

    fun flipTopBits(t: Tensor) {
        val seg = t.segment
        for (i in 0 until t.byteSize) seg.set(ValueLayout.JAVA_BYTE, i, (seg.get(ValueLayout.JAVA_BYTE, i).toInt() xor 0x80).toByte())
    }

    fun reduceType(t: Tensor, op: ReduceOp): Long =
        abi.datatype(if (flipsUnsignedBytes(t, op)) DType.Int8 else t.dtype)

    /**
     * Reductions MPI cannot do right, finished on the host after gathering every rank's data:
     * Float16/BFloat16 (no MPI type), and 8-bit integer sums where the library saturates them
     * (Open MPI 4.1's AVX kernels: 127 + 1 = 127 instead of wrapping to -128).
     */
    fun hostReduced(dtype: DType, op: ReduceOp): Boolean =
        dtype.isHalf || (abi.byteSumSaturates && (dtype == DType.Int8 || dtype == DType.UInt8) && (op == ReduceOp.Sum || op == ReduceOp.Avg))

    val DType.isHalf: Boolean get() = this == DType.Float16 || this == DType.BFloat16
}
