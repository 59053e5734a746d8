package dev.tpcomm.spi

import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.nulls.shouldBeNull
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain

class LaunchEnvironmentSpec : FunSpec({
    test("torchrun, Kubeflow, MPI launchers and Slurm are recognised with their world sizes") {
        LaunchEnvironment.read(mapOf("RANK" to "1", "WORLD_SIZE" to "2", "MASTER_ADDR" to "10.0.0.1")).let {
            it.launcher shouldBe "torchrun"; it.processes shouldBe 2; it.spansProcesses shouldBe true
        }
        LaunchEnvironment.read(mapOf("RANK" to "0", "WORLD_SIZE" to "4", "TORCHELASTIC_RUN_ID" to "x")).launcher shouldBe "torchrun"
        LaunchEnvironment.read(mapOf("PET_NNODES" to "2", "PET_NPROC_PER_NODE" to "4")).processes shouldBe 8
        LaunchEnvironment.read(mapOf("PET_NNODES" to "2", "PET_NPROC_PER_NODE" to "auto")).processes shouldBe 2
        LaunchEnvironment.read(mapOf("OMPI_COMM_WORLD_SIZE" to "3")).processes shouldBe 3
        LaunchEnvironment.read(mapOf("PMI_SIZE" to "2", "PMI_RANK" to "0")).processes shouldBe 2
        LaunchEnvironment.read(mapOf("SLURM_NTASKS" to "16", "SLURM_PROCID" to "3")).launcher shouldBe "srun (Slurm)"
    }

    test("one process, or no launcher: the local backend may serve it") {
        LaunchEnvironment.read(emptyMap()).let { it.spansProcesses shouldBe false; it.localBackendRefusal().shouldBeNull() }
        LaunchEnvironment.read(mapOf("RANK" to "0", "WORLD_SIZE" to "1", "MASTER_ADDR" to "h")).localBackendRefusal().shouldBeNull()
        LaunchEnvironment.read(mapOf("SLURM_NTASKS" to "1")).localBackendRefusal().shouldBeNull()
        LaunchEnvironment.read(mapOf("WORLD_SIZE" to "not a number", "RANK" to "0")).spansProcesses shouldBe false
    }

    test("the refusal says the local backend spans one JVM and names the launch paths that work") {
        val m = LaunchEnvironment.read(mapOf("RANK" to "1", "WORLD_SIZE" to "2", "MASTER_ADDR" to "10.0.0.1", "MASTER_PORT" to "29512")).localBackendRefusal()!!
        m shouldContain "one JVM"
        m shouldContain "2 processes started by torchrun (RANK=1 WORLD_SIZE=2 MASTER_ADDR=10.0.0.1 MASTER_PORT=29512)"
        m shouldContain "mpirun"
        m shouldContain "runLocalWorld"
    }
})
