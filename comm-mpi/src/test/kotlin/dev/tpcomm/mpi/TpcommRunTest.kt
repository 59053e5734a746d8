package dev.tpcomm.mpi

import dev.tpcomm.mpi.jobs.MpiJobs
import dev.tpcomm.mpi.jobs.StoreWorldMain
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainExactlyInAnyOrder
import io.kotest.matchers.longs.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.io.File
import java.util.UUID
import java.util.concurrent.TimeUnit

/**
 * Issue 33 part 5: `tpcomm-run` (scripts/dist/tpcomm-run, the distribution's `bin/tpcomm-run`)
 * starts N local ranks with torchrun's variables, without MPI or Python, and they form a world
 * (Open MPI through the store); a rank that fails ends the others and sets the exit status.
 */
class TpcommRunTest : FunSpec({
    // Surefire runs in the module's folder; the script is the repository's.
    val script = listOf(File("../scripts/dist/tpcomm-run"), File("scripts/dist/tpcomm-run")).firstOrNull { it.exists() } ?: File("../scripts/dist/tpcomm-run")
    val openMpi = File("/usr/lib/x86_64-linux-gnu/libmpi.so.40").exists() && OmpiServer.locate(System.getenv()) != null

    fun run(limitSeconds: Long, vararg args: String): Triple<Int, String, Long> {
        val marker = UUID.randomUUID().toString()
        val out = File.createTempFile("tpcomm-run", ".out")
        val pb = ProcessBuilder(listOf(script.path) + args).redirectErrorStream(true).redirectOutput(out)
        pb.environment().keys.removeIf {
            it.matches(Regex("^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_.*|PET_.*|SLURM_.*|OMPI_.*|PMI_.*|PMIX_.*|MPI_LOCALRANKID|HYDRA_.*|TPCOMM_.*)$"))
        }
        pb.environment()["TPCOMM_RUN_TEST"] = marker
        val started = System.nanoTime()
        val p = pb.start()
        val finished = p.waitFor(limitSeconds, TimeUnit.SECONDS)
        if (!finished) {
            p.toHandle().descendants().forEach { it.destroyForcibly() }
            p.destroyForcibly()
        }
        val ms = (System.nanoTime() - started) / 1_000_000
        ProcessHandle.allProcesses().filter { it.info().commandLine().orElse("").contains(marker) }.forEach { it.destroyForcibly() }
        return Triple(if (finished) p.exitValue() else -1, out.readText().also { out.delete() }, ms)
    }

    test("tpcomm-run -n 3 starts 3 JVMs that form an Open MPI world (Comm.create(\"auto\")) and all-reduce right").config(enabled = openMpi && script.exists()) {
        val java = MpiJobs.javaCommand(StoreWorldMain::class.java.name, listOf("auto", "60"), "tpcomm-run-test")
        val (rc, out, _) = run(90, "-n", "3", "--", *java.toTypedArray())
        val lines = out.lines().filter { it.startsWith("rank ") || it.startsWith("failed ") }.map { it.substringBefore(" create-ms") }
        withClue(out) {
            rc shouldBe 0
            lines shouldContainExactlyInAnyOrder (0 until 3).map { "rank $it of 3 backend mpi sum 6" }
        }
    }

    test("a rank that fails ends the others at once, and tpcomm-run exits with its status").config(enabled = script.exists()) {
        val (rc, out, ms) = run(60, "-n", "3", "--", "sh", "-c", "if [ \"\$RANK\" = 2 ]; then exit 7; fi; sleep 50")
        rc shouldBe 7
        out shouldContain "rank 2 exited with status 7"
        ms shouldBeLessThan 15_000L
    }

    test("bad arguments: exit 2 with a line that says what to change").config(enabled = script.exists()) {
        val (rc, out, _) = run(20, "-n", "0", "true")
        rc shouldBe 2
        out shouldContain "-n needs the number of ranks"
    }
})

private inline fun <T> withClue(clue: String, block: () -> T): T = io.kotest.assertions.withClue(clue.takeLast(4000)) { block() }
