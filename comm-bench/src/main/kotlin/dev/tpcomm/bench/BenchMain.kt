@file:JvmName("BenchMain")

package dev.tpcomm.bench

import dev.tpcomm.BackendUnavailableException
import dev.tpcomm.Comm
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.coroutines.runLocalWorld
import dev.tpcomm.mpi.MpiCommunicator
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext
import java.io.PrintStream
import java.nio.file.Files
import java.nio.file.StandardOpenOption
import kotlin.coroutines.EmptyCoroutineContext
import kotlin.system.exitProcess
import kotlin.time.Duration.Companion.seconds

/**
 * The comm-bench command line (see [BenchOptions.USAGE]). Exit code 0 when every point was
 * measured and correct, 1 when a point had wrong elements, 2 on bad arguments (an unknown or
 * unavailable backend included), 3 when a collective failed. Messages and `--help` use the
 * launcher's name (`-Dtpcomm.command`, set by the binary distribution's `bin/tpcomm-bench`).
 */
public fun main(args: Array<String>) {
    val command = CommandName.of("comm-bench")
    val code = try {
        runBench(args.toList(), System.out, System.err)
    } catch (e: IllegalArgumentException) {
        System.err.println("$command: ${e.message}")
        2
    } catch (e: BackendUnavailableException) {
        // An unknown or unavailable backend is a bad argument here: one line, exit 2.
        System.err.println("$command: ${CommandName.oneLine(e.message)}")
        2
    } catch (e: CommunicationException) {
        System.err.println("$command: a collective failed: ${e.message}")
        3
    }
    System.out.flush()
    exitProcess(code)
}

/** Runs the benchmark for [args], printing the table to [out]; returns the exit code (see [main]). */
public fun runBench(args: List<String>, out: PrintStream, err: PrintStream): Int {
    val options = BenchOptions.parse(args)
    if (options == null) {
        out.println(CommandName.usage(BenchOptions.USAGE, "scripts/bench.sh"))
        return 0
    }
    // Read the peers' files before measuring, so a bad path fails at once.
    options.compare.forEach { CsvRow.read(it) }
    return when {
        options.backend == "local" -> runBlocking(if (options.dispatcher == "pool") Dispatchers.Default else EmptyCoroutineContext) {
            val config = CommConfig(worldSize = options.world, timeout = options.timeoutSeconds.seconds)
            runLocalWorld(options.world, config) { comm -> runRank(comm, options, out, err) }.first()
        }
        !options.worker -> MpiLauncher.launch(options, args, MAIN_CLASS)
        else -> runBlocking {
            val config = CommConfig.fromEnvironment().copy(timeout = options.timeoutSeconds.seconds)
            require(config.worldSize == options.world) {
                "the MPI launcher started ${config.worldSize} ranks but --world is ${options.world}"
            }
            val comm = Comm.create("mpi", config)
            try {
                // The MPI backend's documented idiom for hot loops: run them on the communicator's
                // own thread, so each call reaches MPI without a thread hop (--dispatcher caller: hops).
                val native = (comm as? MpiCommunicator)?.nativeDispatcher
                if (native != null && options.dispatcher != "caller") {
                    withContext(native) { runRank(comm, options, out, err) }
                } else {
                    runRank(comm, options, out, err)
                }
            } finally {
                comm.close()
            }
        }
    }
}

private const val MAIN_CLASS = "dev.tpcomm.bench.BenchMain"

/**
 * One rank's part: every rank measures; rank 0 prints the table and progress, and writes the
 * CSV, repeats file and plot. Returns the exit code (the same on every rank).
 */
internal suspend fun runRank(comm: Communicator, options: BenchOptions, out: PrintStream, err: PrintStream): Int {
    val reporter = comm.rank == 0
    val table = ResultTable(out, options)
    val progress = if (reporter && options.progress) ProgressBar(options.ops.size * options.sizes.size, err) else null
    val results = BenchRunner(comm, options).run { r ->
        if (reporter) {
            progress?.clear()
            table.row(r)
            progress?.step("${r.op.cliName} ${Sizes.human(r.bytes)}")
        }
    }
    if (!reporter) return exitCode(results)
    progress?.finish()
    table.footer()
    options.csv?.let { f ->
        f.toAbsolutePath().parent?.let { Files.createDirectories(it) }
        val lines = results.map { it.csvLine() }
        if (options.appendCsv && Files.exists(f) && Files.size(f) > 0) {
            Files.write(f, lines, StandardOpenOption.APPEND)
        } else {
            Files.write(f, listOf(BenchResult.CSV_HEADER) + lines)
        }
        err.println("comm-bench: wrote ${lines.size} CSV lines to $f")
    }
    options.repeatsCsv?.let { f ->
        f.toAbsolutePath().parent?.let { Files.createDirectories(it) }
        val lines = results.map { it.repeatsLine() }
        if (options.appendCsv && Files.exists(f) && Files.size(f) > 0) {
            Files.write(f, lines, StandardOpenOption.APPEND)
        } else {
            Files.write(f, listOf(BenchResult.repeatsHeader(options.repeats)) + lines)
        }
    }
    options.plot?.let { f ->
        val peers = options.compare.flatMap { CsvRow.read(it) }
            .filter { row -> row.world == options.world && options.ops.any { it.csvName == row.collective } }
        val series = BusbwPlot.seriesOf(results.map { CsvRow.of(it) } + peers)
        BusbwPlot.write(f, "busbw, ${options.ops.joinToString { it.cliName }}, world ${options.world}, ${ResultTable.dtypeName(options.dtype)}", series)
        err.println("comm-bench: wrote plot $f")
    }
    return exitCode(results)
}

private fun exitCode(results: List<BenchResult>): Int = if (results.any { it.wrong > 0 }) 1 else 0
