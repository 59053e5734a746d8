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
    /**
     * MPICH 4.0 compares unsigned values as signed in MPI_MIN/MPI_MAX: UInt8 (MPI_UINT8_T), and, seen
     * on MPICH 4.0.2 here by the conformance suite, UInt32 and UInt64 too (`Max` of the UInt32 values
     * 3061292982, 1213841291 and 4266063303 gave 1213841291). Reduce them as the signed type of the
     * same width with the top bit flipped, which maps unsigned order onto signed order.
     */
    fun flipsUnsignedBytes(t: Tensor, op: ReduceOp): Boolean =
        abi.unsignedMinMaxBroken && t.dtype.isUnsigned && (op == ReduceOp.Min || op == ReduceOp.Max) && !t.device.isGpu

    /** Flips the top (sign) bit of every element of [t] (little-endian: the last byte of each element). */
    fun flipTopBits(t: Tensor) {
        val seg = t.segment
        val width = t.dtype.byteSize.toLong()
        var i = width - 1
        while (i < t.byteSize) {
            seg.set(ValueLayout.JAVA_BYTE, i, (seg.get(ValueLayout.JAVA_BYTE, i).toInt() xor 0x80).toByte())
            i += width
        }
    }

    fun reduceType(t: Tensor, op: ReduceOp): Long =
        abi.datatype(if (flipsUnsignedBytes(t, op)) signedOf(t.dtype) else t.dtype)

    private fun signedOf(dtype: DType): DType = when (dtype) {
        DType.UInt8 -> DType.Int8
        DType.UInt32 -> DType.Int32
        DType.UInt64 -> DType.Int64
        else -> dtype
    }

    /**
     * Reductions MPI cannot do right, finished on the host after gathering every rank's data:
     * Float16/BFloat16 and the FP8 types (no MPI type), and 8/16-bit integer sums where the library
     * saturates them (Open MPI 4.1's AVX kernels: 127 + 1 = 127 instead of wrapping to -128, and
     * likewise for Int16).
     */
    fun hostReduced(dtype: DType, op: ReduceOp): Boolean =
        HostReduction.isNarrowFloat(dtype) ||
            (abi.narrowSumSaturates && (dtype == DType.Int8 || dtype == DType.UInt8 || dtype == DType.Int16) && (op == ReduceOp.Sum || op == ReduceOp.Avg))
}
