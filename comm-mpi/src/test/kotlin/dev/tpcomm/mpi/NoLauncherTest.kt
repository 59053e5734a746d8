package dev.tpcomm.mpi

import dev.tpcomm.mpi.jobs.NoLauncherMain
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.string.shouldStartWith
import java.io.File
import java.util.concurrent.TimeUnit

/**
 * Issue 33 part 3: `Comm.create("mpi")` in a process that `srun` without MPI (not an MPI launcher)
 * started, with no store named (no `MASTER_ADDR`), names the real cause at once (no MPI launcher),
 * instead of initialising a singleton MPI world and then telling the user to pass
 * `CommConfig.fromEnvironment()`, which the program did. (With `MASTER_ADDR`, as under torchrun,
 * Open MPI forms the world through the store: [StoreWorldJobsTest].)
 */
class NoLauncherTest : FunSpec({
    test("srun's variables without an MPI launcher or a store: mpi refuses, naming the missing launcher and what works") {
        val java = File(System.getProperty("java.home"), "bin/java").path
        val cp = System.getProperty("surefire.test.class.path") ?: System.getProperty("java.class.path")
        val pb = ProcessBuilder(java, "--enable-native-access=ALL-UNNAMED", "-cp", cp, NoLauncherMain::class.java.name).redirectErrorStream(true)
        pb.environment().keys.removeIf { it.matches(Regex("^(RANK|WORLD_SIZE|LOCAL_RANK|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_.*|PET_.*|SLURM_.*|OMPI_.*|PMI_.*|PMIX_.*|MPI_LOCALRANKID|HYDRA_.*)$")) }
        pb.environment().putAll(mapOf("SLURM_PROCID" to "1", "SLURM_NTASKS" to "2", "SLURM_LOCALID" to "1"))
        val p = pb.start()
        val out = p.inputStream.bufferedReader().readText()
        p.waitFor(60, TimeUnit.SECONDS) shouldBe true
        val line = out.lines().firstOrNull { it.startsWith("created") || it.startsWith("refused") } ?: error("no result line:\n$out")
        line shouldStartWith "refused BackendUnavailableException"
        line shouldContain "no MPI launcher"
        line shouldContain "srun (Slurm)"
        line shouldContain "mpirun"
        line shouldContain "MASTER_ADDR"
        line shouldContain "env://"
    }
})
