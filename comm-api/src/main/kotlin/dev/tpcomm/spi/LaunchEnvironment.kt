package dev.tpcomm.spi

import dev.tpcomm.InternalTpcommApi

/**
 * What the process's environment says about how it was launched: the launcher that set its
 * variables and the number of processes of the world they describe. Read by the in-process backend
 * to refuse worlds it cannot form (issue 33: an environment that describes several processes
 * never gets a silent one-JVM world), and by rendezvous code.
 *
 * The variables, first match wins:
 * - torchrun (and `torch.distributed.launch`): `WORLD_SIZE` with `RANK`, named torchrun when
 *   `MASTER_ADDR` or a `TORCHELASTIC_*` variable is set;
 * - Kubeflow Trainer (PyTorchJob, TrainJob): `PET_NNODES` times `PET_NPROC_PER_NODE` (a
 *   non-numeric `PET_NPROC_PER_NODE`, such as `auto` or `gpu`, counts as at least one);
 * - MPI launchers: `OMPI_COMM_WORLD_SIZE` (Open MPI's `mpirun`), `PMI_SIZE` (MPICH's hydra, Intel MPI);
 * - Slurm: `SLURM_NTASKS` (or `SLURM_NPROCS`), `srun` with or without MPI.
 *
 * Immutable and thread-safe.
 *
 * @property launcher who set the variables, in words users recognise (`torchrun`, `Kubeflow
 * Trainer (PET_* variables)`, `mpirun (Open MPI)`, ...); null when no launcher variable is set.
 * @property processes how many processes the variables describe (1 without a launcher).
 * @property variables the variables that were read, as `NAME=value`, for messages.
 */
@InternalTpcommApi
public class LaunchEnvironment private constructor(
    public val launcher: String?,
    public val processes: Int,
    public val variables: List<String>,
) {
    /** True when the environment describes a world of more than one process. */
    public val spansProcesses: Boolean get() = processes > 1

    /**
     * Why the in-process backend cannot serve this environment, or null when it can: the local
     * backend spans one JVM, what the environment describes, and the launch paths that work.
     */
    public fun localBackendRefusal(): String? {
        if (!spansProcesses) return null
        return "the local (in-process) backend runs every rank in one JVM, but this process's environment describes a world of " +
            "$processes processes started by $launcher (${variables.joinToString(" ")}): each process would build a world of its own " +
            "and wait for ranks that live in other JVMs. Across processes use \"mpi\" (launched by mpirun/mpiexec, or srun with MPI) " +
            "or \"nccl\"/\"rccl\" (launched by mpirun, torchrun, srun or a Kubernetes job; rendezvous through MPI, " +
            "env:// (MASTER_ADDR, MASTER_PORT), tcp://host:port or file:///shared/path); to run several ranks in one JVM, start it without a launcher and " +
            "call runLocalWorld(n) { comm -> ... } or LocalWorld(n)."
    }

    override fun toString(): String = "LaunchEnvironment(launcher=$launcher, processes=$processes, ${variables.joinToString(" ")})"

    public companion object {
        /** Reads [env] (the process's environment by default). Never throws: a malformed number counts as absent. */
        @JvmStatic
        @JvmOverloads
        public fun read(env: Map<String, String> = System.getenv()): LaunchEnvironment {
            fun int(name: String): Int? = env[name]?.trim()?.toIntOrNull()
            fun shown(vararg names: String) = names.filter { env.containsKey(it) }.map { "$it=${env[it]}" }

            val worldSize = int("WORLD_SIZE")
            if (worldSize != null && env.containsKey("RANK")) {
                val elastic = env.keys.filter { it.startsWith("TORCHELASTIC_") }.sorted()
                val torchrun = env.containsKey("MASTER_ADDR") || elastic.isNotEmpty()
                return LaunchEnvironment(
                    if (torchrun) "torchrun" else "a launcher that set RANK and WORLD_SIZE",
                    worldSize,
                    shown("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") + elastic.take(1).map { "$it=${env[it]}" },
                )
            }
            val nodes = int("PET_NNODES")
            if (nodes != null) {
                val perNode = int("PET_NPROC_PER_NODE") ?: 1
                return LaunchEnvironment("Kubeflow Trainer (PET_* variables)", nodes * perNode, shown("PET_NNODES", "PET_NPROC_PER_NODE", "PET_MASTER_ADDR"))
            }
            int("OMPI_COMM_WORLD_SIZE")?.let {
                return LaunchEnvironment("mpirun (Open MPI)", it, shown("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"))
            }
            int("PMI_SIZE")?.let {
                return LaunchEnvironment("an MPI launcher (mpiexec/hydra, PMI)", it, shown("PMI_RANK", "PMI_SIZE"))
            }
            (int("SLURM_NTASKS") ?: int("SLURM_NPROCS"))?.let {
                return LaunchEnvironment("srun (Slurm)", it, shown("SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS"))
            }
            return LaunchEnvironment(null, 1, emptyList())
        }
    }
}
