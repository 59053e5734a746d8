package dev.tpcomm.bench

import java.io.File
import java.lang.management.ManagementFactory

/**
 * Starts the benchmark's MPI workers: re-executes this same JVM command (same java, flags and
 * classpath) under `mpirun -np N`, with `--worker` added, and waits for it.
 */
internal object MpiLauncher {
    /** The mpirun program for [options]: `--mpirun`, else `mpirun.openmpi` / `mpirun.mpich`. */
    fun mpirun(options: BenchOptions): String = options.mpirun ?: "mpirun.${options.mpi}"

    /** The full command line: mpirun, its flags, then the worker JVM. */
    fun command(options: BenchOptions, args: List<String>, mainClass: String): List<String> {
        val java = ProcessHandle.current().info().command().orElse(System.getProperty("java.home") + "/bin/java")
        val jvmFlags = ManagementFactory.getRuntimeMXBean().inputArguments
            .filterNot { it.startsWith("-agentlib") || it.startsWith("-javaagent") || it.startsWith("-Xdebug") }
            .toMutableList()
        for (needed in listOf("--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector")) {
            if (needed !in jvmFlags) jvmFlags += needed
        }
        val mpiFlags = if (options.mpi == "openmpi") listOf("--allow-run-as-root", "--oversubscribe") else emptyList()
        return listOf(mpirun(options)) + mpiFlags + listOf("-np", options.world.toString(), java) + jvmFlags +
            listOf("-cp", System.getProperty("java.class.path"), mainClass) + args + "--worker"
    }

    /** Finds [program] as a path or on PATH; null when absent. */
    fun which(program: String): String? {
        if (program.contains('/')) return program.takeIf { File(it).canExecute() }
        return System.getenv("PATH").orEmpty().split(File.pathSeparator)
            .map { File(it, program) }.firstOrNull { it.canExecute() }?.path
    }

    /**
     * The variables an MPI launcher sets in each rank's environment (Open MPI, MPICH's hydra, Intel
     * MPI, PMIx launchers): one of them set means this process is already a rank of an MPI job.
     */
    val LAUNCHER_VARIABLES: List<String> = listOf("OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALRANKID")

    /**
     * Refuses to start mpirun from a process that an MPI launcher started: launchers do not nest
     * (Open MPI's inner mpirun crashed in hwloc instead of saying so). [command] is the tool's name,
     * [world] its `--world`; [env] the process's environment.
     */
    fun refuseUnderLauncher(command: String, world: Int, env: Map<String, String> = System.getenv()) {
        val found = LAUNCHER_VARIABLES.filter { env.containsKey(it) }
        require(found.isEmpty()) {
            "--backend mpi launches its own MPI job (mpirun -np $world), but this process was itself started by an MPI launcher " +
                "(${found.joinToString { "$it=${env[it]}" }} set) and MPI launchers do not nest: run it without mpirun, " +
                "as '$command --backend mpi --world $world'"
        }
    }

    /** Runs the workers with inherited stdin/stdout/stderr; returns mpirun's exit code. */
    fun launch(options: BenchOptions, args: List<String>, mainClass: String, env: Map<String, String> = System.getenv()): Int {
        refuseUnderLauncher(CommandName.of("scripts/bench.sh"), options.world, env)
        val prog = mpirun(options)
        requireNotNull(which(prog)) {
            "$prog not found; install ${if (options.mpi == "openmpi") "openmpi-bin libopenmpi-dev" else "mpich libmpich-dev"} " +
                "(apt-get install), or name the launcher with --mpirun PATH"
        }
        val cmd = command(options, args, mainClass)
        val pb = ProcessBuilder(cmd).inheritIO()
        pb.environment().putIfAbsent("OMPI_MCA_btl_base_warn_component_unused", "0")
        val p = pb.start()
        Runtime.getRuntime().addShutdownHook(Thread { if (p.isAlive) p.destroy() })
        return p.waitFor()
    }
}
