package dev.tpcomm.bench

import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldHaveSize
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldStartWith
import java.io.ByteArrayOutputStream
import java.io.PrintStream
import java.nio.file.Files

/** The CLI's MPI path end to end: it launches mpirun itself and the workers run every collective correctly. */
class MpiLaunchTest : FunSpec({
    for (mpi in listOf("openmpi", "mpich")) {
        test("--backend mpi --mpi $mpi launches 2 workers and every collective is correct")
            .config(enabledIf = { MpiLauncher.which("mpirun.$mpi") != null }) {
                val csv = Files.createTempDirectory("mpibench").resolve("out.csv")
                val sink = PrintStream(ByteArrayOutputStream())
                val code = runBench(
                    listOf("--backend", "mpi", "--mpi", mpi, "--world", "2", "--op", "all", "--sizes", "8,1K",
                        "--iters", "2", "--warmup", "1", "--repeats", "1", "--no-progress", "--timeout", "60", "--csv", "$csv"),
                    sink, sink,
                )
                code shouldBe 0
                val lines = Files.readAllLines(csv).drop(1)
                lines shouldHaveSize 12
                lines.forEach { it shouldStartWith "tpcomm_mpi_$mpi," }
            }
    }
})
