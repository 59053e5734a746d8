@file:JvmName("CheckMain")

package dev.tpcomm.bench

import dev.tpcomm.BackendUnavailableException
import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.testkit.CaseKind
import dev.tpcomm.testkit.CaseResult
import dev.tpcomm.testkit.ConformanceCases
import dev.tpcomm.testkit.ConformanceOptions
import dev.tpcomm.testkit.LocalWorldLauncher
import dev.tpcomm.testkit.SpmdConformanceMain
import dev.tpcomm.testkit.SpmdConformanceRunner
import kotlinx.coroutines.TimeoutCancellationException
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withTimeout
import java.lang.management.ManagementFactory
import kotlin.system.exitProcess
import kotlin.time.Duration.Companion.seconds

/** The usage text of `tpcomm-check` (the binary distribution's conformance runner). */
internal val CHECK_USAGE: String = """
    |Usage: tpcomm-check [options]     (comm-testkit's conformance suite against one backend)
    |  --backend local|mpi|NAME  local: in-process ranks, a fresh world per case (default local);
    |                            mpi: N processes under mpirun, launched by this tool (so run
    |                            it without mpirun: under a launcher it refuses, exit 2);
    |                            any other backend: this process is one rank, world from the
    |                            launcher's environment (as dev.tpcomm.testkit.SpmdConformanceMain)
    |  --world N[,N..]           world sizes (local, default 1,2,4) or process count (mpi, default 2)
    |  --mpi openmpi|mpich       MPI implementation for --backend mpi (default openmpi)
    |  --mpirun PATH             mpirun program (default mpirun.openmpi / mpirun.mpich)
    |  --cases REGEX             run only the cases whose name matches
    |  -h, --help                this text
    |Failure cases (a 1 s timeout, a mismatch, ...) abort a scratch communicator of their own; under
    |--backend mpi it is made with mpi.abortOnTimeout=false, so they never end the job.
    |Exit status: 0 when no case failed, 1 when one did, 2 on bad arguments or an unknown or
    |unavailable backend.
    """.trimMargin()

/**
 * `tpcomm-check`: runs the conformance suite (every non-soak case of
 * [dev.tpcomm.testkit.ConformanceCases]) against a backend and prints one line per case and rank,
 * then a summary; see [CHECK_USAGE]. Exit code 0 when nothing failed, 1 otherwise, 2 on bad
 * arguments.
 */
public fun main(args: Array<String>) {
    val command = CommandName.of("tpcomm-check")
    val code = try {
        runCheck(args.toList())
    } catch (e: IllegalArgumentException) {
        System.err.println("$command: ${e.message}")
        2
    } catch (e: BackendUnavailableException) {
        System.err.println("$command: ${CommandName.oneLine(e.message)}")
        2
    }
    System.out.flush()
    exitProcess(code)
}

/** Runs `tpcomm-check` with [args] in a process whose environment is [env]; returns its exit code (see [main]). */
internal fun runCheck(args: List<String>, env: Map<String, String> = System.getenv()): Int {
    var backend = "local"
    var worlds: List<Int>? = null
    var mpi = "openmpi"
    var mpirun: String? = null
    var cases: Regex? = null
    var i = 0
    fun value(name: String): String = args.getOrNull(++i) ?: throw IllegalArgumentException("$name needs a value")
    while (i < args.size) {
        when (val a = args[i]) {
            "--backend" -> backend = value(a)
            "--world", "-g" -> worlds = value(a).split(',').map {
                it.trim().toIntOrNull()?.takeIf { n -> n in 1..64 } ?: throw IllegalArgumentException("--world takes sizes 1..64, got '$it'")
            }
            "--mpi" -> mpi = value(a).also { require(it == "openmpi" || it == "mpich") { "--mpi must be openmpi or mpich, got '$it'" } }
            "--mpirun" -> mpirun = value(a)
            "--cases" -> cases = Regex(value(a))
            "-h", "--help" -> { println(CommandName.usage(CHECK_USAGE, "tpcomm-check")); return 0 }
            else -> throw IllegalArgumentException("unknown argument '$a'; see --help")
        }
        i++
    }
    return when (backend) {
        "local" -> checkLocal(worlds ?: listOf(1, 2, 4), cases)
        "mpi" -> {
            val world = worlds?.singleOrNull() ?: if (worlds == null) 2 else throw IllegalArgumentException("--backend mpi takes one --world size")
            MpiLauncher.refuseUnderLauncher(CommandName.of("tpcomm-check"), world, env)
            checkMpi(world, mpi, mpirun, cases)
        }
        else -> {
            // Refused here, in one line, before SpmdConformanceMain would fail with a stack trace.
            val factory = Comm.backends().firstOrNull { it.name.equals(backend, ignoreCase = true) }
                ?: throw IllegalArgumentException(
                    "unknown backend '$backend'; the backends here are ${(listOf("local", "mpi") + Comm.backends().map { it.name }).distinct().joinToString()}",
                )
            factory.unavailableReason()?.let { throw IllegalArgumentException("backend '$backend' is unavailable here: ${CommandName.oneLine(it)}") }
            val passOn = listOf("--backend", backend) + (cases?.let { listOf("--cases", it.pattern) } ?: emptyList())
            SpmdConformanceMain.main(passOn.toTypedArray())
            0
        }
    }
}

/** Every case on a fresh in-process world of each size (a failure case aborts its world). */
private fun checkLocal(worlds: List<Int>, cases: Regex?): Int {
    val options = ConformanceOptions().withSystemProperties()
    val selected = ConformanceCases.all.filter { it.kind != CaseKind.Soak && (cases?.containsMatchIn(it.name) ?: true) }
    require(selected.isNotEmpty()) { "no case matches --cases ${cases?.pattern}" }
    var passed = 0
    var failed = 0
    var skipped = 0
    val start = System.nanoTime()
    for (n in worlds) {
        for (case in selected) {
            val why = case.whyNotRun(options, n)
            if (why != null) {
                skipped++
                continue
            }
            val timeout = if (case.kind == CaseKind.Failure) options.failureTimeout else options.timeout
            val config = CommConfig(worldSize = n, timeout = timeout, checkConsistency = true)
            val results: List<CaseResult> = try {
                runBlocking {
                    withTimeout(SpmdConformanceRunner.guard(case, options) + 10.seconds) {
                        LocalWorldLauncher.run(n, config) { comm -> SpmdConformanceRunner.runCase(case, comm, options) }
                    }
                }
            } catch (e: TimeoutCancellationException) {
                listOf(CaseResult(case.name, -1, n, CaseResult.Status.Failed, "the world did not end within the case's guard: ${e.message}"))
            } catch (e: Exception) {
                listOf(CaseResult(case.name, -1, n, CaseResult.Status.Failed, "the world ended with ${e::class.qualifiedName}: ${e.message}"))
            }
            val bad = results.filter { it.status == CaseResult.Status.Failed }
            val ms = results.maxOfOrNull { it.durationMillis } ?: 0
            if (bad.isEmpty()) {
                passed++
                println("[local, world of $n] PASSED ${case.name} ($ms ms)")
            } else {
                failed++
                println("[local, world of $n] FAILED ${case.name}")
                bad.forEach { println("  rank ${it.rank}: ${it.message}") }
            }
        }
    }
    val seconds = (System.nanoTime() - start) / 1e9
    println("tpcomm-check: local backend, worlds $worlds: $passed passed, $failed failed, $skipped skipped (not applicable) in %.1f s".format(seconds))
    return if (failed == 0) 0 else 1
}

/**
 * The MPI options of the failure cases' scratch communicators (comm-mpi's `MpiConfig` keys, as
 * comm-mpi's own conformance jobs use them): a timeout aborts only that communicator, and calls are
 * polled so the peers' pending calls fail with the abort.
 */
private val SCRATCH_MPI_OPTIONS: Map<String, String> = linkedMapOf("mpi.abortOnTimeout" to "false", "mpi.progress" to "NonBlocking")

/** N processes of [SpmdConformanceMain] (`--backend mpi`) under mpirun; its exit code is ours. */
private fun checkMpi(world: Int, mpi: String, mpirunPath: String?, cases: Regex?): Int {
    val prog = mpirunPath ?: "mpirun.$mpi"
    requireNotNull(MpiLauncher.which(prog)) {
        "$prog not found; install ${if (mpi == "openmpi") "openmpi-bin libopenmpi-dev" else "mpich libmpich-dev"} (apt-get install), or name the launcher with --mpirun PATH"
    }
    val java = ProcessHandle.current().info().command().orElse(System.getProperty("java.home") + "/bin/java")
    val jvmFlags = ManagementFactory.getRuntimeMXBean().inputArguments
        .filterNot { it.startsWith("-agentlib") || it.startsWith("-javaagent") || it.startsWith("-Xdebug") }
        .toMutableList()
    for (needed in listOf("--enable-native-access=ALL-UNNAMED", "--add-modules=jdk.incubator.vector")) {
        if (needed !in jvmFlags) jvmFlags += needed
    }
    val mpiFlags = if (mpi == "openmpi") listOf("--allow-run-as-root", "--oversubscribe") else emptyList()
    val command = listOf(prog) + mpiFlags + listOf("-np", world.toString(), java) + jvmFlags +
        listOf("-cp", System.getProperty("java.class.path"), SpmdConformanceMain::class.java.name, "--backend", "mpi", "--suite", "mpi-$mpi-$world") +
        // The failure cases (a 1 s timeout, a mismatch, a cancelled call) abort their scratch
        // communicator on purpose: it must not end the job (with the default mpi.abortOnTimeout a
        // timeout calls MPI_Abort, and the check ended with mpirun's exit 1 on Open MPI and MPICH;
        // issue 20 item 5), and its peers must learn of the abort while their calls are pending.
        SCRATCH_MPI_OPTIONS.flatMap { (k, v) -> listOf("--scratch-option", "$k=$v") } +
        (cases?.let { listOf("--cases", it.pattern) } ?: emptyList())
    val pb = ProcessBuilder(command).inheritIO()
    pb.environment().putIfAbsent("OMPI_MCA_btl_base_warn_component_unused", "0")
    val p = pb.start()
    Runtime.getRuntime().addShutdownHook(Thread { if (p.isAlive) p.destroy() })
    val code = p.waitFor()
    println("tpcomm-check: mpi backend ($mpi), world of $world: " + if (code == 0) "no case failed" else "a case failed or a rank crashed (mpirun exit $code)")
    return if (code == 0) 0 else 1
}
