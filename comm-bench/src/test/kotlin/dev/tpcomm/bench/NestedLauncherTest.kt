package dev.tpcomm.bench

import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.string.shouldContain

/**
 * `tpcomm-check --backend mpi` and `scripts/bench.sh --backend mpi` start their own mpirun job; run
 * under mpirun they must refuse at once, saying so, instead of nesting launchers (Open MPI's inner
 * mpirun crashed in hwloc). Nothing here starts a process: the refusal comes before any launch.
 */
class NestedLauncherTest : FunSpec({
    val launched = listOf(
        "OMPI_COMM_WORLD_SIZE" to "2", // Open MPI
        "PMI_RANK" to "0",             // MPICH's hydra, Intel MPI
        "PMI_SIZE" to "2",
        "PMIX_RANK" to "1",            // PMIx launchers (srun, prterun)
        "MPI_LOCALRANKID" to "0",      // hydra
    )
    for ((name, value) in launched) {
        test("tpcomm-check --backend mpi refuses to launch mpirun when $name is set") {
            val e = shouldThrow<IllegalArgumentException> {
                runCheck(listOf("--backend", "mpi", "--world", "2", "--mpirun", "/nonexistent/mpirun"), env = mapOf(name to value, "PATH" to "/usr/bin"))
            }
            e.message!! shouldContain "launches its own MPI job"
            e.message!! shouldContain "$name=$value"
            e.message!! shouldContain "run it without mpirun"
            e.message!! shouldContain "--backend mpi --world 2"
        }
    }

    test("tpcomm-check --backend mpi outside a launcher goes on to find mpirun (here a missing one, named)") {
        val e = shouldThrow<IllegalArgumentException> {
            runCheck(listOf("--backend", "mpi", "--world", "2", "--mpirun", "/nonexistent/mpirun"), env = mapOf("PATH" to "/usr/bin"))
        }
        e.message!! shouldContain "/nonexistent/mpirun not found"
    }

    test("the benchmark's MPI launcher refuses to nest too") {
        val options = BenchOptions.parse(listOf("--backend", "mpi", "--world", "2", "--mpirun", "/nonexistent/mpirun"))!!
        val e = shouldThrow<IllegalArgumentException> {
            MpiLauncher.launch(options, emptyList(), "unused.Main", env = mapOf("OMPI_COMM_WORLD_SIZE" to "2"))
        }
        e.message!! shouldContain "launches its own MPI job (mpirun -np 2)"
        e.message!! shouldContain "OMPI_COMM_WORLD_SIZE=2"
    }
})
