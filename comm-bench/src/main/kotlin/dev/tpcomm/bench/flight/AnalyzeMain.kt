package dev.tpcomm.bench.flight

import java.nio.file.Files
import java.nio.file.Path
import kotlin.system.exitProcess

/**
 * `scripts/analyze.sh DIR`: reads every rank's flight-recorder dump in DIR (the directory of
 * `CommConfig.flightRecorderDir` / `TPCOMM_FLIGHT_RECORDER_DIR`) and prints `verdict: ...` naming
 * the culprit rank(s) and the collective sequence number, then a per-rank evidence table.
 * Exit status: 0 healthy or straggler, 1 a failure was found, 2 bad usage or no dumps.
 */
public object AnalyzeMain {
    /** Entry point. */
    @JvmStatic
    public fun main(args: Array<String>) {
        if (args.size != 1 || args[0] == "-h" || args[0] == "--help") {
            System.err.println("usage: scripts/analyze.sh DIR   (DIR holds <communicator>-rank<R>.json flight-recorder dumps)")
            exitProcess(2)
        }
        val dir = Path.of(args[0])
        if (!Files.isDirectory(dir)) {
            System.err.println("analyze: $dir is not a directory")
            exitProcess(2)
        }
        val result = FlightAnalyzer().analyze(dir)
        println(result)
        exitProcess(
            when (result.kind) {
                FlightAnalyzer.Kind.Healthy, FlightAnalyzer.Kind.Straggler -> 0
                FlightAnalyzer.Kind.NoDumps -> 2
                else -> 1
            },
        )
    }
}
