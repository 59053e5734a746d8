package dev.tpcomm.mpi

import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldHaveSize
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.lang.foreign.Arena
import java.lang.foreign.ValueLayout

class MpiAbiTest : FunSpec({
    test("Open MPI handles are the addresses of the ompi_mpi_* symbols") {
        val names = HashMap<String, Long>()
        val abi = OpenMpiAbi { name -> names.getOrPut(name) { 0x1000L + names.size * 16 } }
        abi.commWorld shouldBe names.getValue("ompi_mpi_comm_world")
        abi.datatype(DType.Float32) shouldBe names.getValue("ompi_mpi_float")
        abi.datatype(DType.Int8) shouldBe names.getValue("ompi_mpi_int8_t")
        abi.datatype(DType.UInt8) shouldBe names.getValue("ompi_mpi_uint8_t")
        abi.datatype(DType.Float16) shouldBe names.getValue("ompi_mpi_uint16_t")
        abi.op(ReduceOp.Avg) shouldBe names.getValue("ompi_mpi_op_sum")
        abi.op(ReduceOp.BitwiseXor) shouldBe names.getValue("ompi_mpi_op_bxor")
        abi.datatype(DType.UInt32) shouldBe names.getValue("ompi_mpi_uint32_t")
        abi.datatype(DType.UInt64) shouldBe names.getValue("ompi_mpi_uint64_t")
        abi.datatype(DType.Int16) shouldBe names.getValue("ompi_mpi_int16_t")
        abi.datatype(DType.Bool) shouldBe names.getValue("ompi_mpi_c_bool")
        abi.datatype(DType.Float8E5M2) shouldBe names.getValue("ompi_mpi_uint8_t")
        abi.op(ReduceOp.Max, DType.Bool) shouldBe names.getValue("ompi_mpi_op_lor")
        abi.op(ReduceOp.Product, DType.Bool) shouldBe names.getValue("ompi_mpi_op_land")
        abi.op(ReduceOp.BitwiseXor, DType.Bool) shouldBe names.getValue("ompi_mpi_op_lxor")
        abi.inPlace shouldBe 1L
        abi.statusIgnore shouldBe 0L
        abi.anySource shouldBe -1
        abi.handleBytes shouldBe 8
        abi.narrowSumSaturates shouldBe true
    }

    test("a missing Open MPI symbol is named in the error") {
        val e = shouldThrow<IllegalStateException> { OpenMpiAbi { name -> if (name == "ompi_mpi_op_bxor") 0L else 64L } }
        e.message shouldContain "ompi_mpi_op_bxor"
    }

    test("MPICH handles are the integer constants of its mpi.h") {
        MpichAbi.commWorld shouldBe 0x44000000L
        MpichAbi.datatype(DType.Float32) shouldBe 0x4c00040aL
        MpichAbi.datatype(DType.Float64) shouldBe 0x4c00080bL
        MpichAbi.datatype(DType.Int64) shouldBe 0x4c00083aL
        MpichAbi.op(ReduceOp.Sum) shouldBe 0x58000003L
        MpichAbi.op(ReduceOp.Max) shouldBe 0x58000001L
        MpichAbi.requestNull shouldBe 0x2c000000L
        MpichAbi.inPlace shouldBe -1L
        MpichAbi.statusIgnore shouldBe 1L
        MpichAbi.anySource shouldBe -2
        MpichAbi.handleBytes shouldBe 4
        MpichAbi.unsignedMinMaxBroken shouldBe true
        MpichAbi.datatype(DType.UInt32) shouldBe 0x4c00043dL
        MpichAbi.datatype(DType.UInt64) shouldBe 0x4c00083eL
        MpichAbi.datatype(DType.Int16) shouldBe 0x4c000238L
        MpichAbi.datatype(DType.Bool) shouldBe 0x4c00013fL
        MpichAbi.datatype(DType.Float8E4M3) shouldBe MpichAbi.datatype(DType.UInt8)
        MpichAbi.op(ReduceOp.Sum, DType.Bool) shouldBe 0x58000007L // MPI_LOR
        MpichAbi.op(ReduceOp.Min, DType.Bool) shouldBe 0x58000005L // MPI_LAND
        MpichAbi.op(ReduceOp.BitwiseXor, DType.Bool) shouldBe 0x58000009L // MPI_LXOR
        MpichAbi.op(ReduceOp.Sum, DType.Int16) shouldBe 0x58000003L
        // Float16 and BFloat16 share MPI_UINT16_T; the two FP8 types share MPI_UINT8_T with UInt8.
        DType.entries.map { MpichAbi.datatype(it) }.toSet() shouldHaveSize DType.entries.size - 3
    }

    test("Open MPI's 24-byte status: source, tag, error, size_t count") {
        Arena.ofConfined().use { a ->
            val s = a.allocate(24)
            s.set(ValueLayout.JAVA_INT, 0, 3); s.set(ValueLayout.JAVA_INT, 4, 42); s.set(ValueLayout.JAVA_INT, 8, 0)
            s.set(ValueLayout.JAVA_LONG, 16, 5_000_000_000L)
            OpenMpiStatusLayout.parse(s) shouldBe StatusInfo(3, 42, 0, 5_000_000_000L)
        }
    }

    test("MPICH's 20-byte status: count split in low word and high bits above the cancelled flag") {
        Arena.ofConfined().use { a ->
            val s = a.allocate(20)
            val count = 5_000_000_000L
            s.set(ValueLayout.JAVA_INT, 0, (count and 0xFFFF_FFFFL).toInt())
            s.set(ValueLayout.JAVA_INT, 4, ((count ushr 32).toInt() shl 1) or 1) // cancelled bit set
            s.set(ValueLayout.JAVA_INT, 8, 2); s.set(ValueLayout.JAVA_INT, 12, 7); s.set(ValueLayout.JAVA_INT, 16, 15)
            MpichStatusLayout.parse(s) shouldBe StatusInfo(2, 7, 15, count)
        }
    }

    test("handles are read and written with the ABI's width") {
        Arena.ofConfined().use { a ->
            val s = a.allocate(16)
            MpichAbi.writeHandle(s, 0, 0x84000002L)
            MpichAbi.readHandle(s, 0) shouldBe (0x84000002L.toInt()).toLong()
            s.get(ValueLayout.JAVA_INT, 4) shouldBe 0
        }
    }

    test("the implementation is identified from MPI_Get_library_version") {
        MpiImplementation.fromVersionString("Open MPI v4.1.4, package: Debian OpenMPI") shouldBe MpiImplementation.OpenMpi
        MpiImplementation.fromVersionString("MPICH Version:\t4.0.2\nMPICH Release date: ...") shouldBe MpiImplementation.Mpich
        MpiImplementation.fromVersionString("Intel(R) MPI Library 2021.10 for Linux* OS") shouldBe MpiImplementation.IntelMpi
        MpiImplementation.fromVersionString("MVAPICH2 Version 2.3.7") shouldBe MpiImplementation.Mvapich
        MpiImplementation.fromVersionString("Some other MPI 1.0") shouldBe null
        MpiImplementation.IntelMpi.mpichAbi shouldBe true
        MpiImplementation.Mvapich.mpichAbi shouldBe true
    }
})
