@file:JvmName("FlightRecorders")

package dev.tpcomm.coroutines

import dev.tpcomm.Communicator
import java.nio.file.Path

/** A communicator that keeps a [FlightRecorder] (every tpcomm backend's communicator is one). */
public interface FlightRecorded {
    /** This communicator's recorder. Thread-safe. */
    public val flightRecorder: FlightRecorder
}

/**
 * Writes this communicator's flight-recorder dump now, as `<dir>/<communicator>-rank<R>.json`
 * (schema `tpcomm.flight-recorder` version 1), into [directory] or else the configured
 * `CommConfig.flightRecorderDir`, and returns the file. Thread-safe; does not communicate.
 *
 * @throws IllegalStateException when no directory is given or configured.
 * @throws IllegalArgumentException when the communicator keeps no flight recorder.
 * @throws java.io.IOException when the file cannot be written.
 */
@JvmOverloads
public fun Communicator.dumpFlightRecorder(directory: Path? = null): Path {
    val recorder = requireNotNull((this as? FlightRecorded)?.flightRecorder) {
        "${this::class.simpleName} keeps no tpcomm flight recorder"
    }
    return recorder.dumpToFile(directory)
}
