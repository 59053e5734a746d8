package dev.tpcomm.coroutines.local

import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.longs.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.string.shouldStartWith
import java.io.File
import java.util.concurrent.TimeUnit

/**
 * Issue 33 part 3: a JVM whose environment describes a world of several processes (torchrun,
 * Kubeflow, Slurm without MPI, an MPI launcher) never gets a silent in-process world: `local`
 * refuses at `Comm.create`, within seconds, saying that it spans one JVM and naming the launchers
 * that work; `auto` does not pick it. Each case starts a JVM with exactly that environment.
 */
class MultiProcessEnvironmentTest : FunSpec({
    fun run(env: Map<String, String>): List<String> {
        val java = File(System.getProperty("java.home"), "bin/java").path
        val cp = System.getProperty("surefire.test.class.path") ?: System.getProperty("java.class.path")
        val pb = ProcessBuilder(java, "--enable-native-access=ALL-UNNAMED", "-cp", cp, MultiProcessEnvironmentProgram::class.java.name, "local", "auto")
            .redirectErrorStream(true)
        val launcherVars = Regex("^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|MASTER_ADDR|MASTER_PORT|TORCHELASTIC_.*|PET_.*|SLURM_.*|OMPI_.*|PMI_.*|PMIX_.*|MPI_LOCALRANKID|HYDRA_.*|TPCOMM_.*)$")
        pb.environment().keys.removeIf { launcherVars.matches(it) }
        pb.environment().putAll(env)
        val started = System.nanoTime()
        val p = pb.start()
        val out = p.inputStream.bufferedReader().readText()
        p.waitFor(60, TimeUnit.SECONDS) shouldBe true
        ((System.nanoTime() - started) / 1_000_000) shouldBeLessThan 30_000
        return out.lines().filter { it.startsWith("created ") || it.startsWith("refused ") }.also {
            if (it.size != 2) error("expected 2 result lines, got:\n$out")
        }
    }

    fun checkRefused(lines: List<String>, launcher: String) {
        val (local, auto) = lines
        local shouldStartWith "refused local: BackendUnavailableException"
        local shouldContain "one JVM"
        local shouldContain launcher
        local shouldContain "mpirun"
        local shouldContain "runLocalWorld"
        auto shouldStartWith "refused auto"   // no other backend here: auto names local's reason
        auto shouldContain "one JVM"
    }

    test("torchrun's variables (RANK, WORLD_SIZE=2, MASTER_ADDR): local refuses and auto does not pick it") {
        checkRefused(
            run(mapOf("RANK" to "1", "WORLD_SIZE" to "2", "LOCAL_RANK" to "1", "LOCAL_WORLD_SIZE" to "2", "MASTER_ADDR" to "127.0.0.1", "MASTER_PORT" to "29512")),
            "torchrun",
        )
    }

    test("Kubeflow's PET_* variables: local refuses") {
        checkRefused(
            run(mapOf("PET_NNODES" to "2", "PET_NPROC_PER_NODE" to "1", "PET_NODE_RANK" to "0", "PET_MASTER_ADDR" to "trainer-0", "PET_MASTER_PORT" to "29500")),
            "Kubeflow",
        )
    }

    test("srun without MPI (SLURM_NTASKS=4): local refuses") {
        checkRefused(run(mapOf("SLURM_PROCID" to "0", "SLURM_NTASKS" to "4", "SLURM_LOCALID" to "0")), "srun")
    }

    test("an MPI launcher's world of 2 (OMPI_COMM_WORLD_SIZE): local refuses") {
        checkRefused(run(mapOf("OMPI_COMM_WORLD_RANK" to "0", "OMPI_COMM_WORLD_SIZE" to "2", "OMPI_COMM_WORLD_LOCAL_RANK" to "0")), "mpirun")
    }

    test("one process (WORLD_SIZE=1, or no launcher): local still creates its world of one") {
        run(mapOf("RANK" to "0", "WORLD_SIZE" to "1", "MASTER_ADDR" to "127.0.0.1", "MASTER_PORT" to "29512")).forEach {
            it shouldStartWith "created"
        }
        run(emptyMap()).forEach { it shouldStartWith "created" }
    }
})
