package dev.tpcomm.mpi

import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

/**
 * The constants and struct layouts of one MPI ABI, read from its `mpi.h`. Handles are widened to
 * `Long` whatever their C type (Open MPI: pointers; MPICH: `int`); the binding narrows them back.
 */
internal interface MpiAbi {
    /** Bytes of one handle in C (`MPI_Comm`, `MPI_Request`, ...): 8 for Open MPI, 4 for MPICH. */
    val handleBytes: Int
    val commWorld: Long
    val commNull: Long
    val requestNull: Long
    val errorsReturn: Long
    val inPlace: Long
    val statusIgnore: Long
    val anySource: Int
    val anyTag: Int
    val undefined: Int

    /** The `MPI_TAG_UB` attribute key (for `MPI_Comm_get_attr`). */
    val tagUbKey: Int
    val maxErrorString: Int
    val statusLayout: StatusLayout

    /**
     * MPI datatype carrying [dtype]; Float16/BFloat16 travel as `MPI_UINT16_T` and the FP8 types as
     * `MPI_UINT8_T` (no arithmetic: reduced on the host), Bool as `MPI_C_BOOL` (MPI's "logical" category).
     */
    fun datatype(dtype: DType): Long

    /** True when MPI_MIN/MPI_MAX on unsigned integers (8, 32 and 64 bits) compare them as signed (MPICH 4.0). */
    val unsignedMinMaxBroken: Boolean get() = false

    /** True when MPI_SUM on 8- and 16-bit integers saturates instead of wrapping around (Open MPI 4.1's AVX kernels). */
    val narrowSumSaturates: Boolean get() = false

    /** `MPI_BYTE`. */
    val byteType: Long

    /** `MPI_LONG` (int64 on LP64), used for the signature exchange and timing. */
    val int64Type: Long

    /** MPI op for [op]; [ReduceOp.Avg] maps to `MPI_SUM` (the engine divides afterwards), [ReduceOp.PreMulSum] too (the engine scales first). */
    fun op(op: ReduceOp): Long

    /** `MPI_LAND`, `MPI_LOR`, `MPI_LXOR`: the ops MPI defines on `MPI_C_BOOL` (MPI 4.0, 6.9.2). */
    val logicalAnd: Long
    val logicalOr: Long
    val logicalXor: Long

    /**
     * MPI op for [op] on [dtype]: on Bool (`MPI_C_BOOL`, whose only ops are the logical ones) Sum,
     * Max and BitwiseOr are `MPI_LOR`, Product, Min and BitwiseAnd `MPI_LAND`, BitwiseXor `MPI_LXOR`;
     * otherwise [op] of [op].
     */
    fun op(op: ReduceOp, dtype: DType): Long {
        if (dtype != DType.Bool) return op(op)
        return when (op) {
            ReduceOp.Sum, ReduceOp.Max, ReduceOp.BitwiseOr -> logicalOr
            ReduceOp.Product, ReduceOp.Min, ReduceOp.BitwiseAnd -> logicalAnd
            ReduceOp.BitwiseXor -> logicalXor
            else -> throw IllegalArgumentException("$op is not defined on Bool")
        }
    }

    /** Reads a handle (e.g. an `MPI_Request` or `MPI_Comm` written by MPI) at [offset] of [segment]. */
    fun readHandle(segment: MemorySegment, offset: Long): Long =
        if (handleBytes == 8) segment.get(ValueLayout.JAVA_LONG_UNALIGNED, offset)
        else segment.get(ValueLayout.JAVA_INT_UNALIGNED, offset).toLong()

    /** Writes a handle at [offset] of [segment]. */
    fun writeHandle(segment: MemorySegment, offset: Long, handle: Long) {
        if (handleBytes == 8) segment.set(ValueLayout.JAVA_LONG_UNALIGNED, offset, handle)
        else segment.set(ValueLayout.JAVA_INT_UNALIGNED, offset, handle.toInt())
    }
}

/** What an `MPI_Status` says, parsed from either layout. */
internal data class StatusInfo(val source: Int, val tag: Int, val error: Int, val byteCount: Long)

/** Layout of `MPI_Status` in one ABI. */
internal interface StatusLayout {
    val size: Long
    fun parse(status: MemorySegment): StatusInfo
}

/** Open MPI 4.x: `int MPI_SOURCE, MPI_TAG, MPI_ERROR; int _cancelled; size_t _ucount;` (24 bytes). */
internal object OpenMpiStatusLayout : StatusLayout {
    override val size: Long = 24
    override fun parse(status: MemorySegment): StatusInfo = StatusInfo(
        source = status.get(ValueLayout.JAVA_INT_UNALIGNED, 0),
        tag = status.get(ValueLayout.JAVA_INT_UNALIGNED, 4),
        error = status.get(ValueLayout.JAVA_INT_UNALIGNED, 8),
        byteCount = status.get(ValueLayout.JAVA_LONG_UNALIGNED, 16),
    )
}

/**
 * MPICH 3.x/4.x (and Intel MPI, MVAPICH): `int count_lo; int count_hi_and_cancelled;
 * int MPI_SOURCE, MPI_TAG, MPI_ERROR;` (20 bytes). The byte count is `count_lo` (unsigned) plus
 * the high bits kept above the cancelled flag (bit 0) of the second word.
 */
internal object MpichStatusLayout : StatusLayout {
    override val size: Long = 20
    override fun parse(status: MemorySegment): StatusInfo {
        val lo = status.get(ValueLayout.JAVA_INT_UNALIGNED, 0).toLong() and 0xFFFF_FFFFL
        val hi = (status.get(ValueLayout.JAVA_INT_UNALIGNED, 4) ushr 1).toLong()
        return StatusInfo(
            source = status.get(ValueLayout.JAVA_INT_UNALIGNED, 8),
            tag = status.get(ValueLayout.JAVA_INT_UNALIGNED, 12),
            error = status.get(ValueLayout.JAVA_INT_UNALIGNED, 16),
            byteCount = lo or (hi shl 32),
        )
    }
}
