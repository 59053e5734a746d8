package dev.tpcomm

import dev.tpcomm.spi.CollectiveChecks
import dev.tpcomm.spi.CollectiveShapes
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainExactly
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.string.shouldNotContain
import io.kotest.matchers.types.shouldBeInstanceOf
import kotlinx.coroutines.runBlocking

class ApiSpec : FunSpec({
    test("exceptions carry and print rank, backend, operation and sequence number") {
        val e = CommunicationTimeoutException("rank 3 never arrived", 1, "local", "allReduce", 17, flightRecorderDump = "{}")
        e.message shouldBe "[local rank 1, allReduce #17] rank 3 never arrived"
        e.reason shouldBe "rank 3 never arrived"
        e.flightRecorderDump shouldBe "{}"
        e.shouldBeInstanceOf<CommunicationException>()
        val m = CollectiveMismatchException("differs", 0, "mpi", "broadcast", 2, listOf(1, 3), listOf("root"))
        m.ranks shouldContainExactly listOf(1, 3)
        m.fields shouldContainExactly listOf("root")
        BackendUnavailableException("nccl", "libnccl.so.2 not found").shouldBeInstanceOf<CommunicationException>()
    }

    test("ReduceOp support table: bitwise on integers and Bool only, Avg on all but Bool") {
        for (op in ReduceOp.entries) for (dt in DType.entries) {
            val expected = when {
                op.isBitwise -> dt.isInteger || dt == DType.Bool
                op == ReduceOp.Avg -> dt != DType.Bool
                else -> true
            }
            op.supports(dt) shouldBe expected
        }
        DType.entries.filter { it.isFloatingPoint } shouldContainExactly
            listOf(DType.Float32, DType.Float64, DType.Float16, DType.BFloat16, DType.Float8E4M3, DType.Float8E5M2)
        DType.entries.filter { it.isInteger } shouldContainExactly
            listOf(DType.Int8, DType.UInt8, DType.Int32, DType.Int64, DType.UInt32, DType.UInt64, DType.Int16)
    }

    test("the dtypes' ordinals are part of the signature wire format: the first eight keep theirs") {
        DType.entries.take(8) shouldContainExactly
            listOf(DType.Float32, DType.Float64, DType.Float16, DType.BFloat16, DType.Int8, DType.UInt8, DType.Int32, DType.Int64)
    }

    test("argument checks say what to change") {
        shouldThrow<IllegalArgumentException> { CollectiveChecks.root(4, 4, "broadcast") }.message shouldContain "0 until 4"
        val t = Tensor.zeros(DType.Float32, 6, 2)
        shouldThrow<IllegalArgumentException> { CollectiveChecks.dim(t, 2, "allGather") }.message shouldContain "-2..1"
        shouldThrow<IllegalArgumentException> { CollectiveChecks.divisible(t, 0, 4, "reduceScatter") }.message shouldContain "multiple of 4"
        shouldThrow<IllegalArgumentException> { CollectiveChecks.op(ReduceOp.BitwiseXor, DType.Float32, "allReduce") }.message shouldContain "integer"
        shouldThrow<IllegalArgumentException> { CollectiveChecks.device(t, Device.Cuda(0), "allReduce") }.message shouldContain "host tensor"
        shouldThrow<IllegalArgumentException> { CollectiveChecks.peer(5, 2, "send", allowAny = false) }
        CollectiveChecks.peer(Communicator.ANY_SOURCE, 2, "recv", allowAny = true)
        shouldThrow<IllegalArgumentException> { CollectiveChecks.tag(-1, "send", allowAny = false) }
        CollectiveShapes.allGather(t, 3, 1) shouldContainExactly listOf(6, 6)
        CollectiveShapes.reduceScatter(t, 3, -2) shouldContainExactly listOf(2, 2)
    }

    test("Comm.create names what is missing") {
        val e = shouldThrow<BackendUnavailableException> { runBlocking { Comm.create("nosuch", CommConfig()) } }
        e.message shouldContain "no backend named 'nosuch'"
        e.message shouldNotContain "comm-nosuch" // no such module exists: do not advise adding it
        e.message shouldContain "mpi (dev.tpcomm:comm-mpi)"
        e.message shouldContain "local (dev.tpcomm:comm-coroutines)"
    }

    test("Comm.create(\"MPI\") advises the real module, comm-mpi, and lists the known backends") {
        val e = shouldThrow<BackendUnavailableException> { runBlocking { Comm.create("MPI", CommConfig()) } }
        e.message shouldNotContain "comm-MPI"
        e.message shouldContain "dev.tpcomm:comm-mpi"
        for (known in listOf("local", "mpi", "nccl", "rccl")) e.message shouldContain known
    }
})
