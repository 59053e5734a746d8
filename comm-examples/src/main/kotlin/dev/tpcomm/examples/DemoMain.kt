@file:JvmName("DemoMain")

package dev.tpcomm.examples

import dev.tpcomm.BackendUnavailableException
import dev.tpcomm.Comm
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommConfig
import dev.tpcomm.coroutines.runLocalWorld
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.runBlocking
import java.io.File
import java.lang.management.ManagementFactory
import kotlin.system.exitProcess

/**
 * `scripts/demo.sh`: the tensor-parallel MLP demo (see [DemoOptions.USAGE]). Exit code 0 when the
 * tensor-parallel model matches the dense one (max relative error below 1e-5), 1 when it does
 * not, 2 on bad arguments (an unknown or unavailable backend included), 3 when a collective failed.
 * Messages and `--help` use the launcher's name (`-Dtpcomm.command`, set by the binary
 * distribution's `bin/tpcomm-demo`), else `demo`.
 */
public fun main(args: Array<String>) {
    val code = try {
        runDemo(args.toList())
    } catch (e: IllegalArgumentException) {
        System.err.println("$COMMAND: ${e.message}")
        2
    } catch (e: BackendUnavailableException) {
        // An unknown or unavailable backend is a bad argument: one line, exit 2.
        System.err.println("$COMMAND: " + e.message.orEmpty().lines().map { it.trim() }.filter { it.isNotEmpty() }.joinToString(" "))
        2
    } catch (e: CommunicationException) {
        System.err.println("$COMMAND: a collective failed: ${e.message}")
        3
    }
    System.out.flush()
    exitProcess(code)
}

/** Runs the demo for [args] and returns the exit code (see [main]). */
public fun runDemo(args: List<String>): Int {
    val options = DemoOptions.parse(args)
    if (options == null) {
        println(if (COMMAND == "demo") DemoOptions.USAGE else DemoOptions.USAGE.replaceFirst("scripts/demo.sh", COMMAND))
        return 0
    }
    val outcome: DemoOutcome = when {
        options.backend == "local" -> runBlocking(Dispatchers.Default) {
            runLocalWorld(options.world, CommConfig(worldSize = options.world)) { comm -> TpDemo(comm, options).run() }.first()
        }
        !options.worker -> return launchMpi(options, args)
        else -> runBlocking {
            val config = CommConfig.fromEnvironment()
            require(config.worldSize == options.world) { "mpirun started ${config.worldSize} ranks but --world is ${options.world}" }
            val comm = Comm.create("mpi", config)
            try {
                TpDemo(comm, options).run()
            } finally {
                comm.close()
            }
        }
    }
    return if (outcome.maxRelativeError < options.tolerance) 0 else 1
}

/** Re-runs this JVM command under `mpirun -np N` with `--worker`; returns mpirun's exit code. */
private fun launchMpi(options: DemoOptions, args: List<String>): Int {
    val prog = options.mpirun ?: "mpirun.${options.mpi}"
    val found = if (prog.contains('/')) prog.takeIf { File(it).canExecute() }
    else System.getenv("PATH").orEmpty().split(File.pathSeparator).map { File(it, prog) }.firstOrNull { it.canExecute() }?.path
    requireNotNull(found) {
        "$prog not found; install ${if (options.mpi == "openmpi") "openmpi-bin libopenmpi-dev" else "mpich libmpich-dev"} (apt-get install), or pass --mpirun PATH"
    }
    val java = ProcessHandle.current().info().command().orElse(System.getProperty("java.home") + "/bin/java")
    val flags = ManagementFactory.getRuntimeMXBean().inputArguments.filterNot { it.startsWith("-agentlib") || it.startsWith("-javaagent") }.toMutableList()
    for (f in listOf("--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector")) if (f !in flags) flags += f
    val mpiFlags = if (options.mpi == "openmpi") listOf("--allow-run-as-root", "--oversubscribe") else emptyList()
    val cmd = listOf(prog) + mpiFlags + listOf("-np", options.world.toString(), java) + flags +
        listOf("-cp", System.getProperty("java.class.path"), "dev.tpcomm.examples.DemoMain") + args + "--worker"
    val pb = ProcessBuilder(cmd).inheritIO()
    pb.environment().putIfAbsent("OMPI_MCA_btl_base_warn_component_unused", "0")
    val p = pb.start()
    Runtime.getRuntime().addShutdownHook(Thread { if (p.isAlive) p.destroy() })
    return p.waitFor()
}

/** The name messages and `--help` use: the distribution launcher's (`-Dtpcomm.command`), else `demo`. */
private val COMMAND: String = System.getProperty("tpcomm.command")?.takeIf { it.isNotBlank() } ?: "demo"
