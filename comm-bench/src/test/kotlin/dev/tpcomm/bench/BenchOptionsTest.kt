package dev.tpcomm.bench

import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainInOrder
import io.kotest.matchers.doubles.plusOrMinus
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.nio.file.Path

class BenchOptionsTest : FunSpec({
    test("sizes with K/M/G suffixes") {
        Sizes.parse("8") shouldBe 8L
        Sizes.parse("64K") shouldBe 65536L
        Sizes.parse("1M") shouldBe 1048576L
        Sizes.parse("2GiB") shouldBe 2147483648L
        Sizes.parse("16k") shouldBe 16384L
        Sizes.parseList("8,1K, 64K,1M,8") shouldBe listOf(8L, 1024L, 65536L, 1048576L)
    }

    test("bad sizes say what a size looks like") {
        shouldThrow<IllegalArgumentException> { Sizes.parse("12X") }.message shouldContain "64K"
        shouldThrow<IllegalArgumentException> { Sizes.parse("-4") }
        shouldThrow<IllegalArgumentException> { Sizes.parseList(" , ") }
    }

    test("nccl-tests ranges: -b -e -f and -i") {
        Sizes.range(8, 128, 2) shouldBe listOf(8L, 16L, 32L, 64L, 128L)
        Sizes.range(100, 350, 1, 100) shouldBe listOf(100L, 200L, 300L)
        shouldThrow<IllegalArgumentException> { Sizes.range(64, 8) }.message shouldContain "below"
        shouldThrow<IllegalArgumentException> { Sizes.range(8, 64, 1, 0) }
    }

    test("human sizes") {
        Sizes.human(8) shouldBe "8 B"
        Sizes.human(65536) shouldBe "64 KiB"
        Sizes.human(64L shl 20) shouldBe "64 MiB"
        Sizes.human(1000) shouldBe "1000 B"
    }

    test("defaults are the peers' sizes, float32 all-reduce on 4 local ranks") {
        val o = BenchOptions.parse(emptyList())!!
        o.backend shouldBe "local"
        o.world shouldBe 4
        o.ops shouldBe listOf(BenchOp.AllReduce)
        o.sizes shouldBe listOf(8L, 1024L, 65536L, 1048576L, 16777216L, 67108864L)
        o.dtype shouldBe DType.Float32
        o.implLabel shouldBe "tpcomm_local"
    }

    test("every option parses, long and nccl-tests short forms") {
        val o = BenchOptions.parse(listOf(
            "--backend", "mpi", "--mpi=mpich", "--op", "all_gather,reduce-scatter", "-g", "2", "-b", "8", "-e", "64", "-f", "4",
            "-d", "double", "-o", "max", "-r", "1", "-w", "3", "-n", "7", "--repeats", "5", "--csv", "out.csv", "--append",
            "--plot", "p.png", "--compare", "a.csv,b.csv", "--no-check", "--no-progress", "--timeout", "30", "--time", "0.5s", "--warmup-time", "0.2", "--dispatcher", "caller",
        ))!!
        o.backend shouldBe "mpi"
        o.mpi shouldBe "mpich"
        o.ops shouldBe listOf(BenchOp.AllGather, BenchOp.ReduceScatter)
        o.world shouldBe 2
        o.sizes shouldBe listOf(8L, 32L)
        o.dtype shouldBe DType.Float64
        o.redop shouldBe ReduceOp.Max
        o.root shouldBe 1
        o.warmup shouldBe 3
        o.iters shouldBe 7
        o.repeats shouldBe 5
        o.csv shouldBe Path.of("out.csv")
        o.appendCsv shouldBe true
        o.plot shouldBe Path.of("p.png")
        o.compare shouldBe listOf(Path.of("a.csv"), Path.of("b.csv"))
        o.check shouldBe false
        o.progress shouldBe false
        o.timeoutSeconds shouldBe 30
        o.timeBudgetSeconds shouldBe (0.5 plusOrMinus 1e-12)
        o.implLabel shouldBe "tpcomm_mpi_mpich"
        o.warmupSeconds shouldBe (0.2 plusOrMinus 1e-12)
        o.dispatcher shouldBe "caller"
    }

    test("--op all lists every collective; names join with the peers' CSV") {
        BenchOptions.parse(listOf("--op", "all"))!!.ops shouldBe BenchOp.entries.toList()
        BenchOp.entries.map { it.csvName } shouldContainInOrder listOf("allreduce", "allgather")
        BenchOp.parse("allreduce") shouldBe BenchOp.AllReduce
        BenchOp.parse("All-To-All") shouldBe BenchOp.AllToAll
    }

    test("--help gives null, usage names every option") {
        BenchOptions.parse(listOf("--help")) shouldBe null
        for (opt in listOf("--backend", "--op", "--world", "--mpi", "--sizes", "--dtype", "--warmup", "--iters", "--csv", "--plot", "--compare")) {
            BenchOptions.USAGE shouldContain opt
        }
    }

    test("bad arguments fail with what to change") {
        fun bad(vararg a: String) = shouldThrow<IllegalArgumentException> { BenchOptions.parse(a.toList()) }.message!!
        bad("--op", "allsum") shouldContain "all_reduce"
        bad("--backend", "nccl") shouldContain "local or mpi"
        bad("--world", "0") shouldContain "at least 1"
        bad("--world", "two") shouldContain "whole number"
        bad("--dtype", "float8") shouldContain "float32"
        bad("--sizes", "6", "--dtype", "float32") shouldContain "multiples of 4"
        bad("--root", "4", "--world", "4") shouldContain "0..3"
        bad("--redop", "bxor") shouldContain "integer"
        bad("--bogus") shouldContain "unknown argument"
        bad("--csv") shouldContain "needs a value"
        bad("--sizes", "8", "-b", "8") shouldContain "not both"
        bad("-f", "2") shouldContain "range"
        bad("--mpi", "intel") shouldContain "openmpi or mpich"
        bad("--dispatcher", "io") shouldContain "auto, single or pool"
        bad("--dispatcher", "single", "--backend", "mpi") shouldContain "use native or caller"
        bad("--dispatcher", "caller") shouldContain "use single or pool"
        bad("--warmup-time", "soon") shouldContain "seconds"
    }
})
