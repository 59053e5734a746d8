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

    test("ReduceOp's static fields for Java hold the objects whichever class the JVM initializes first") {
        // Fresh loaders for dev.tpcomm classes: touch an object first (as Kotlin code does), then read
        // the Java field. With ReduceOp a sealed class the field read null here (an initialization cycle).
        val base = ReduceOp::class.java.protectionDomain.codeSource.location
        val parent = ReduceOp::class.java.classLoader
        fun freshLoader() = object : java.net.URLClassLoader(arrayOf(base), parent) {
            override fun loadClass(name: String, resolve: Boolean): Class<*> = synchronized(getClassLoadingLock(name)) {
                if (!name.startsWith("dev.tpcomm.")) return super.loadClass(name, resolve)
                findLoadedClass(name) ?: findClass(name)
            }
        }
        for (first in listOf("Sum", "BitwiseXor")) {
            val loader = freshLoader()
            val obj = Class.forName("dev.tpcomm.ReduceOp$$first", true, loader).getField("INSTANCE").get(null)
            val field = Class.forName("dev.tpcomm.ReduceOp", true, loader).getField(first).get(null)
            (field === obj) shouldBe true
        }
        ReduceOp::class.java.getField("Max").get(null) shouldBe ReduceOp.Max
    }

    test("ReduceOp.PreMulSum: Float32, Float64, Float16 and BFloat16 only, equal by factor, named PreMulSum, the factor rounded to the dtype") {
        for (dt in DType.entries) ReduceOp.PreMulSum(0.5).supports(dt) shouldBe (dt in listOf(DType.Float32, DType.Float64, DType.Float16, DType.BFloat16))
        ReduceOp.PreMulSum(0.25) shouldBe ReduceOp.PreMulSum(0.25)
        (ReduceOp.PreMulSum(0.25) == ReduceOp.PreMulSum(0.5)) shouldBe false
        ReduceOp.PreMulSum(0.25).name shouldBe "PreMulSum"
        ReduceOp.PreMulSum(0.25).toString() shouldBe "PreMulSum(0.25)"
        ReduceOp.PreMulSum(1.0 / 3).factorIn(DType.Float64) shouldBe 1.0 / 3
        ReduceOp.PreMulSum(1.0 / 3).factorIn(DType.Float32) shouldBe (1.0f / 3).toDouble()
        ReduceOp.PreMulSum(1.0 / 3).factorIn(DType.BFloat16) shouldBe 0.333984375
        ReduceOp.PreMulSum(1.0 / 3).factorIn(DType.Float16) shouldBe 0.333251953125
        ReduceOp.entries.map { it.name } shouldBe listOf("Sum", "Product", "Min", "Max", "Avg", "BitwiseAnd", "BitwiseOr", "BitwiseXor")
        ReduceOp.entries.map { it.ordinal } shouldBe (0..7).toList()
        ReduceOp.valueOf("Max") shouldBe ReduceOp.Max
        shouldThrow<IllegalArgumentException> { ReduceOp.valueOf("PreMulSum") }.message shouldContain "construct ReduceOp.PreMulSum(factor)"
        shouldThrow<IllegalArgumentException> { CollectiveChecks.op(ReduceOp.PreMulSum(0.5), DType.Int32, "allReduce") }.message shouldContain "Float32, Float64, Float16 and BFloat16 only"
        shouldThrow<IllegalArgumentException> { CollectiveChecks.op(ReduceOp.PreMulSum(0.5), DType.Float8E4M3, "allReduce") }.message shouldContain "Float32, Float64, Float16 and BFloat16 only"
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
