package dev.tpcomm.mpi

import dev.tpcomm.DType
import dev.tpcomm.ReduceOp

/**
 * Open MPI 4.x ABI: every predefined handle is the address of an exported data symbol
 * (`MPI_COMM_WORLD` is `&ompi_mpi_comm_world`), resolved through [symbol] (dlsym) once.
 *
 * @throws IllegalStateException naming the symbol when the library does not export one.
 */
internal class OpenMpiAbi(symbol: (String) -> Long) : MpiAbi {
    private val resolve: (String) -> Long = { name ->
        val address = symbol(name)
        check(address != 0L) { "symbol $name not found in the Open MPI library; is it Open MPI 4.x or newer?" }
        address
    }

    override val handleBytes: Int = 8
    override val commWorld: Long = resolve("ompi_mpi_comm_world")
    override val commNull: Long = resolve("ompi_mpi_comm_null")
    override val requestNull: Long = resolve("ompi_request_null")
    override val errorsReturn: Long = resolve("ompi_mpi_errors_return")
    override val inPlace: Long = 1L
    override val statusIgnore: Long = 0L
    override val anySource: Int = -1
    override val anyTag: Int = -1
    override val undefined: Int = -32766

    // mpi.h: `enum { MPI_TAG_UB, MPI_HOST, ... }` (MPI-1 attribute keys, the first is 0).
    override val tagUbKey: Int = 0
    override val maxErrorString: Int = 256
    override val statusLayout: StatusLayout = OpenMpiStatusLayout
    // ompi/mca/op/avx/op_avx_functions.c (v4.1.4): OP_AVX_FUNC(sum, i, 8, int8_t, adds) and (sum, i, 16, int16_t, adds).
    override val narrowSumSaturates: Boolean = true
    override val logicalAnd: Long = resolve("ompi_mpi_op_land")
    override val logicalOr: Long = resolve("ompi_mpi_op_lor")
    override val logicalXor: Long = resolve("ompi_mpi_op_lxor")
    override val byteType: Long = resolve("ompi_mpi_byte")
    override val int64Type: Long = resolve("ompi_mpi_int64_t")

    private val types = LongArray(DType.entries.size).also { t ->
        for (d in DType.entries) {
            t[d.ordinal] = resolve(
                when (d) {
                    DType.Float32 -> "ompi_mpi_float"
                    DType.Float64 -> "ompi_mpi_double"
                    DType.Float16, DType.BFloat16 -> "ompi_mpi_uint16_t"
                    DType.Int8 -> "ompi_mpi_int8_t"
                    DType.UInt8 -> "ompi_mpi_uint8_t"
                    DType.Int32 -> "ompi_mpi_int32_t"
                    DType.Int64 -> "ompi_mpi_int64_t"
                    DType.UInt32 -> "ompi_mpi_uint32_t"
                    DType.UInt64 -> "ompi_mpi_uint64_t"
                    DType.Float8E4M3, DType.Float8E5M2 -> "ompi_mpi_uint8_t"
                    DType.Int16 -> "ompi_mpi_int16_t"
                    DType.Bool -> "ompi_mpi_c_bool"
                },
            )
        }
    }

    private val ops = LongArray(ReduceOp.entries.size).also { o ->
        for (op in ReduceOp.entries) {
            o[op.ordinal] = resolve(
                when (op) {
                    ReduceOp.Sum, ReduceOp.Avg, is ReduceOp.PreMulSum -> "ompi_mpi_op_sum"
                    ReduceOp.Product -> "ompi_mpi_op_prod"
                    ReduceOp.Min -> "ompi_mpi_op_min"
                    ReduceOp.Max -> "ompi_mpi_op_max"
                    ReduceOp.BitwiseAnd -> "ompi_mpi_op_band"
                    ReduceOp.BitwiseOr -> "ompi_mpi_op_bor"
                    ReduceOp.BitwiseXor -> "ompi_mpi_op_bxor"
                },
            )
        }
    }

    override fun datatype(dtype: DType): Long = types[dtype.ordinal]
    override fun op(op: ReduceOp): Long = ops[if (op is ReduceOp.PreMulSum) ReduceOp.Sum.ordinal else op.ordinal]
}
