package dev.tpcomm.testkit

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import kotlinx.coroutines.runBlocking
import java.nio.file.Path
import kotlin.system.exitProcess

/**
 * A ready-made SPMD program for multi-process worlds: every rank of, e.g.,
 * `mpirun -n 4 java -cp ... dev.tpcomm.testkit.SpmdConformanceMain --backend mpi --suite mpi-openmpi-4 --reports target/surefire-reports`
 * creates its communicator with [Comm.create] (rank and size from the launcher's environment),
 * runs [SpmdConformanceRunner], prints one line per case, writes `TEST-<suite>-rank<r>.xml` into
 * the reports folder, and exits with 0 when nothing failed, 1 otherwise (2 on bad arguments).
 *
 * Options: `--backend NAME` (default `auto`); `--suite NAME` (default `<backend>-<worldSize>`);
 * `--reports DIR` (no XML without it); `--cases REGEX` (run only cases whose name matches);
 * `--soak` (include the soak); `--scratch create|split|none` (how failure cases get a fresh
 * communicator: another [Comm.create] with the short timeout — the default —, a split of the
 * main communicator, or not at all, reporting them skipped); `--scratch-option KEY=VALUE`
 * (repeatable: a backend option, [CommConfig.options], of the communicators `--scratch create`
 * makes, e.g. `mpi.abortOnTimeout=false` so that a failure case's timeout aborts only its own
 * communicator, not the job). Budgets come from the
 * `-Dtpcomm.testkit.*` system properties ([ConformanceOptions.withSystemProperties]).
 */
public object SpmdConformanceMain {
    /** Runs the suite on this process's rank; see the object's KDoc for the arguments. */
    @JvmStatic
    public fun main(args: Array<String>) {
        val parsed = try { parse(args) } catch (e: IllegalArgumentException) {
            System.err.println("SpmdConformanceMain: ${e.message}")
            exitProcess(2)
        }
        val failed = runBlocking { run(parsed) }
        exitProcess(if (failed == 0) 0 else 1)
    }

    internal class Arguments(
        val backend: String = "auto",
        val suite: String? = null,
        val reports: Path? = null,
        val cases: Regex? = null,
        val soak: Boolean = false,
        val scratch: String = "create",
        val scratchOptions: Map<String, String> = emptyMap(),
    )

    internal fun parse(args: Array<String>): Arguments {
        var a = Arguments()
        var i = 0
        fun value(name: String): String = args.getOrNull(++i) ?: throw IllegalArgumentException("$name needs a value")
        while (i < args.size) {
            when (val arg = args[i]) {
                "--backend" -> a = Arguments(value(arg), a.suite, a.reports, a.cases, a.soak, a.scratch, a.scratchOptions)
                "--suite" -> a = Arguments(a.backend, value(arg), a.reports, a.cases, a.soak, a.scratch, a.scratchOptions)
                "--reports" -> a = Arguments(a.backend, a.suite, Path.of(value(arg)), a.cases, a.soak, a.scratch, a.scratchOptions)
                "--cases" -> a = Arguments(a.backend, a.suite, a.reports, Regex(value(arg)), a.soak, a.scratch, a.scratchOptions)
                "--soak" -> a = Arguments(a.backend, a.suite, a.reports, a.cases, true, a.scratch, a.scratchOptions)
                "--scratch" -> {
                    val s = value(arg)
                    require(s in setOf("create", "split", "none")) { "--scratch must be create, split or none, got '$s'" }
                    a = Arguments(a.backend, a.suite, a.reports, a.cases, a.soak, s, a.scratchOptions)
                }
                "--scratch-option" -> {
                    val kv = value(arg)
                    val eq = kv.indexOf('=')
                    require(eq > 0) { "--scratch-option takes KEY=VALUE, got '$kv'" }
                    a = Arguments(a.backend, a.suite, a.reports, a.cases, a.soak, a.scratch, a.scratchOptions + (kv.substring(0, eq) to kv.substring(eq + 1)))
                }
                else -> throw IllegalArgumentException("unknown argument '$arg'; see the KDoc of dev.tpcomm.testkit.SpmdConformanceMain")
            }
            i++
        }
        return a
    }

    /** Runs the suite and returns how many cases failed on this rank. */
    internal suspend fun run(a: Arguments): Int {
        val options = ConformanceOptions().withSystemProperties()
        val base = CommConfig.fromEnvironment().copy(checkConsistency = true)
        val comm = Comm.create(a.backend, base.copy(timeout = options.timeout))
        val scratch = when (a.scratch) {
            "create" -> ScratchCommunicatorFactory { _, timeout ->
                Comm.create(a.backend, base.copy(timeout = timeout, options = base.options + a.scratchOptions))
            }
            "split" -> ScratchCommunicatorFactory.Split
            else -> null
        }
        val suite = a.suite ?: "${comm.backendName}-${comm.worldSize}"
        val results = comm.use {
            SpmdConformanceRunner.run(
                comm,
                filter = { (a.soak || it.kind != CaseKind.Soak) && (a.cases?.containsMatchIn(it.name) ?: true) },
                report = { r -> println("[$suite rank ${r.rank}/${r.worldSize}] ${r.status} ${r.case} (${r.durationMillis} ms)" + (r.message?.let { "\n$it" } ?: "")) },
                options = options,
                scratch = scratch,
            )
        }
        a.reports?.let { writeJUnitXml(it.resolve("TEST-$suite-rank${comm.rank}.xml"), "$suite.rank${comm.rank}", results) }
        return results.count { it.status == CaseResult.Status.Failed }
    }
}
