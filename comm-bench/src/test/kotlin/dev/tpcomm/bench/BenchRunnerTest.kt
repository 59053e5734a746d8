package dev.tpcomm.bench

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainAll
import io.kotest.matchers.collections.shouldHaveSize
import io.kotest.matchers.doubles.shouldBeGreaterThan
import io.kotest.matchers.doubles.shouldBeLessThan
import io.kotest.matchers.longs.shouldBeGreaterThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.withContext
import java.io.ByteArrayOutputStream
import java.io.PrintStream
import java.nio.file.Files
import javax.imageio.ImageIO

class BenchRunnerTest : FunSpec({
    fun tiny(vararg extra: String) = BenchOptions.parse(
        listOf("--sizes", "8,1K", "--iters", "2", "--warmup", "1", "--repeats", "1", "--no-progress") + extra,
    )!!

    test("every collective is correct on 2 and 3 ranks, every dtype with sum") {
        for (world in listOf(2, 3)) {
            for (dtype in listOf("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64", "uint32", "uint64", "f8e4m3", "f8e5m2", "int16", "bool")) {
                val o = tiny("--op", "all", "--world", "$world", "--dtype", dtype, "--root", "1")
                val results = withContext(Dispatchers.Default) {
                    runLocalWorld(world, CommConfig(worldSize = world)) { comm -> BenchRunner(comm, o).run() }
                }
                results.forEach { rankResults ->
                    rankResults shouldHaveSize 12
                    rankResults.forEach { r ->
                        r.wrong shouldBe 0L
                        r.timeUs shouldBeGreaterThan 0.0
                        r.iterations shouldBe 2L
                    }
                }
            }
        }
    }

    test("every reduction op is checked exactly") {
        for (redop in listOf("prod", "min", "max", "avg")) {
            val o = tiny("--op", "all_reduce,reduce_scatter,reduce", "--world", "4", "--redop", redop)
            val r = withContext(Dispatchers.Default) { runLocalWorld(4) { comm -> BenchRunner(comm, o).run() } }[0]
            r.map { it.wrong } shouldBe List(6) { 0L }
        }
        for (dtype in listOf("bool", "uint64", "f8e4m3")) for (redop in listOf("sum", "prod", "min", "max")) {
            val o = tiny("--op", "all_reduce,reduce", "--world", "3", "--redop", redop, "--dtype", dtype)
            withContext(Dispatchers.Default) { runLocalWorld(3) { comm -> BenchRunner(comm, o).run() } }[0].map { it.wrong } shouldBe List(4) { 0L }
        }
        for (redop in listOf("band", "bor", "bxor")) {
            val o = tiny("--op", "all_reduce", "--world", "3", "--redop", redop, "--dtype", "int32")
            withContext(Dispatchers.Default) { runLocalWorld(3) { comm -> BenchRunner(comm, o).run() } }[0].map { it.wrong } shouldBe listOf(0L, 0L)
        }
    }

    test("the default warm-up stops at its time limit, the same iteration on every rank") {
        val o = BenchOptions.parse(listOf("--sizes", "8", "--iters", "2", "--repeats", "1", "--warmup-time", "0.05", "--no-progress", "--world", "3"))!!
        val started = System.nanoTime()
        val r = withContext(Dispatchers.Default) { runLocalWorld(3) { comm -> BenchRunner(comm, o).run() } }
        r.map { it.single().wrong } shouldBe listOf(0L, 0L, 0L)
        ((System.nanoTime() - started) / 1e9) shouldBeLessThan 30.0
    }

    test("a communicator that corrupts results gets a nonzero #wrong and exit code 1") {
        val o = tiny("--op", "all_reduce", "--world", "2")
        val results = withContext(Dispatchers.Default) {
            runLocalWorld(2) { real ->
                val broken = object : Communicator by real {
                    override suspend fun allReduce(tensor: Tensor, op: ReduceOp): Tensor {
                        real.allReduce(tensor, op)
                        if (tensor.dtype == DType.Float32 && tensor.numel > 1) tensor.setDouble(1, -5.0)
                        return tensor
                    }
                }
                val out = ByteArrayOutputStream()
                val code = runRank(broken, o, PrintStream(out), PrintStream(ByteArrayOutputStream()))
                code to out.toString()
            }
        }
        results[0].first shouldBe 1
        results[0].second shouldContain "FAILED"
        // wrong elements are summed over both ranks: element 1 on each rank, each size
        results[0].second shouldContain "      2"
    }

    test("the CLI end to end on the local backend: table, CSV, repeats, plot with peers") {
        val dir = Files.createTempDirectory("bench")
        val peers = dir.resolve("peers.csv")
        Files.write(peers, listOf(BenchResult.CSV_HEADER, "c_mpi,allreduce,2,8,0.26,0.03,0.03", "c_mpi,allreduce,2,1024,0.45,2.2,2.2", "c_mpi,allgather,4,8,1,1,1"))
        val csv = dir.resolve("out.csv")
        val png = dir.resolve("out.png")
        val out = ByteArrayOutputStream()
        val err = ByteArrayOutputStream()
        val code = runBench(
            listOf("--world", "2", "--sizes", "8,1K", "--iters", "3", "--warmup", "1", "--repeats", "3", "--csv", "$csv",
                "--repeats-csv", "${dir.resolve("rep.csv")}", "--plot", "$png", "--compare", "$peers"),
            PrintStream(out), PrintStream(err),
        )
        code shouldBe 0
        val table = out.toString()
        table shouldContain "#wrong"
        table shouldContain "first: mean of the first 1000 calls at the size"
        table shouldContain "Out of bounds values : 0 OK"
        val lines = Files.readAllLines(csv)
        lines[0] shouldBe BenchResult.CSV_HEADER
        lines shouldHaveSize 3
        lines[1] shouldContain "tpcomm_local,allreduce,2,8,"
        Files.readAllLines(dir.resolve("rep.csv"))[0] shouldBe "impl,collective,world,bytes,K,t1_us,t2_us,t3_us"
        ImageIO.read(png.toFile()).width shouldBe 1100
        err.toString() shouldContain "2/2"   // the progress bar
        Files.size(png) shouldBeGreaterThan 1000L
    }

    test("bad peer CSV fails before measuring; --help prints usage") {
        val out = ByteArrayOutputStream()
        runBench(listOf("--help"), PrintStream(out), PrintStream(out)) shouldBe 0
        out.toString() shouldContain "--backend"
        val e = runCatching { runBench(listOf("--compare", "/nonexistent.csv"), PrintStream(out), PrintStream(out)) }.exceptionOrNull()
        (e is IllegalArgumentException) shouldBe true
        e!!.message!! shouldContain "does not exist"
    }

    test("the MPI launcher re-runs this JVM under mpirun with --worker") {
        val o = BenchOptions.parse(listOf("--backend", "mpi", "--world", "4"))!!
        val cmd = MpiLauncher.command(o, listOf("--backend", "mpi", "--world", "4"), "dev.tpcomm.bench.BenchMain")
        cmd.take(5) shouldBe listOf("mpirun.openmpi", "--allow-run-as-root", "--oversubscribe", "-np", "4")
        cmd shouldContainAll listOf("-cp", "dev.tpcomm.bench.BenchMain", "--worker", "--enable-native-access=ALL-UNNAMED")
        val m = BenchOptions.parse(listOf("--backend", "mpi", "--mpi", "mpich", "--world", "2"))!!
        MpiLauncher.command(m, emptyList(), "X").take(3) shouldBe listOf("mpirun.mpich", "-np", "2")
        val missing = BenchOptions.parse(listOf("--backend", "mpi", "--mpirun", "/nonexistent/mpirun"))!!
        runCatching { MpiLauncher.launch(missing, emptyList(), "X") }.exceptionOrNull()!!.message!! shouldContain "not found"
    }

    test("each point times its first calls before its warm-up (--first N), none with --first 0") {
        val timedFirst = withContext(Dispatchers.Default) {
            runLocalWorld(2) { comm -> BenchRunner(comm, tiny("--first", "50")).run() }
        }
        timedFirst.flatten().forEach { r -> r.firstUs shouldBeGreaterThan 0.0 }
        val none = withContext(Dispatchers.Default) {
            runLocalWorld(2) { comm -> BenchRunner(comm, tiny("--first", "0")).run() }
        }
        none.flatten().forEach { r -> r.firstUs.isNaN() shouldBe true }
    }
})
