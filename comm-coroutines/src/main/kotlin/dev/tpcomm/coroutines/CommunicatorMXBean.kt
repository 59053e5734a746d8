package dev.tpcomm.coroutines

/**
 * Live state of one communicator over JMX, registered by its [FlightRecorder] as
 * `dev.tpcomm:type=Communicator,backend=<backend>,communicator=<id>,rank=<rank>,instance=<n>`
 * (JConsole and VisualVM show it under `dev.tpcomm`). Every attribute is read when asked, from the
 * recorder's lock-free ring; reading never blocks the communicator. After the communicator is
 * closed (or collected) the MBean is removed. `-Dtpcomm.jmx=false` registers none.
 */
public interface CommunicatorMXBean {
    /** The backend's name. */
    public val backend: String

    /** The communicator's id, the same on every rank. */
    public val communicator: String

    /** This rank. */
    public val rank: Int

    /** The number of ranks. */
    public val worldSize: Int

    /** The sequence number of the last operation issued (0 before the first). */
    public val lastSequenceIssued: Long

    /** The highest sequence number among the recent records that completed. */
    public val lastSequenceCompleted: Long

    /** How many recent operations are still in flight. */
    public val inFlightCount: Int

    /** The age in milliseconds of the oldest operation in flight, 0 when none. */
    public val oldestInFlightMillis: Long

    /** The operations in flight, one line each with their age: `seq 12 (collective 9) allReduce Float32[2] op=Sum: 1503 ms`. */
    public val inFlight: List<String>

    /** Whether the communicator aborted or an operation failed with a communication error. */
    public val aborted: Boolean

    /** The first failure or abort cause, empty when none. */
    public val abortCause: String

    /** Whether the communicator was closed. */
    public val closed: Boolean

    /** The recent records, oldest first, one line each. */
    public val recentRecords: List<String>

    /** The flight-recorder dump as JSON (schema `tpcomm.flight-recorder`, version 1). */
    public fun dumpJson(): String

    /** Writes the dump file into the configured directory and returns its path. @throws IllegalStateException when none is configured. */
    public fun dumpToFile(): String
}
