package dev.tpcomm.mpi

import java.util.logging.Handler
import java.util.logging.Level
import java.util.logging.LogRecord
import java.util.logging.Logger

/**
 * Tells [MpiRuntime] when this process's program failed, so that the job ends within seconds
 * instead of at the other ranks' timeout (issue 20 item 3):
 *
 * - **An exception escapes `main`.** A default uncaught-exception handler (installed once, when MPI
 *   is initialised) first does what the JVM would have done (the previous default handler, or the
 *   JVM's own `Exception in thread "main" ...` stack trace: the cause is printed once), then, for
 *   the main thread only, reports the failure. Without it the rank's JVM went on to its shutdown
 *   hook, whose barrier before `MPI_Finalize` waited for the peers, which were blocked in their
 *   next collective until the timeout (10 minutes by default). An exception that ends another
 *   thread does not end the program and is left alone.
 * - **`System.exit(N)` with N != 0.** The JDK logs `Runtime.exit` calls to the `System.Logger`
 *   named `java.lang.Runtime` at level DEBUG (JDK 21+, `java.lang.Shutdown.logRuntimeExit`, JDK-8301627):
 *   a `java.util.logging` handler on that logger records the status before the shutdown hooks run,
 *   and [MpiRuntime.onShutdown] then ends the job instead of waiting in the barrier.
 * - **A signal** (SIGINT from a user's Ctrl-C, SIGTERM, SIGHUP) exits through the same path, from
 *   `java.lang.Terminator`, with status 128 + the signal's number: recorded apart ([signalStatus]),
 *   and [MpiRuntime.onShutdown] aborts the job (issue 32 finding 6: a rank interrupted between
 *   collectives went to `MPI_Finalize` while its peers waited for it until their timeout). Where the
 *   application replaced the `System.Logger` backend (an `LoggerFinder` of its own), the status is
 *   not seen and a non-zero exit is treated as a clean one: the launcher ends the job when the
 *   process exits (docs/mpi.md).
 *
 * A clean end (`main` returns, `System.exit(0)`) is not a failure: that rank waits for its peers
 * as before. Thread-safe; installed once per process.
 */
internal object MpiProgramFailure {
    /** The status of the first `System.exit(N)` call with N != 0 seen; 0 when none. */
    @Volatile var exitStatus: Int = 0
        private set

    private var installed = false

    /**
     * 128 + the number of the first signal that started the JVM's shutdown (130 for SIGINT, 143 for
     * SIGTERM, 129 for SIGHUP); 0 when none did.
     */
    @Volatile var signalStatus: Int = 0
        private set

    /** The `java.lang.Runtime` logger, held strongly (`java.util.logging` keeps loggers weakly). */
    private var exitLogger: Logger? = null

    private val STATUS = Regex("""Runtime\.exit\((-?\d+)\)""")

    /** Installs the handlers (once); [onFailure] gets a description and the exit code to end the job with. */
    fun install(onFailure: (description: String, code: Int) -> Unit) {
        synchronized(this) {
            if (installed) return
            installed = true
        }
        val previous = Thread.getDefaultUncaughtExceptionHandler()
        Thread.setDefaultUncaughtExceptionHandler { thread, e ->
            if (previous != null) {
                previous.uncaughtException(thread, e)
            } else {
                // What ThreadGroup.uncaughtException prints when there is no default handler.
                System.err.print("Exception in thread \"${thread.name}\" ")
                e.printStackTrace(System.err)
            }
            if (thread.name == "main") onFailure("${e.javaClass.name} escaped main; its stack trace is above", 1)
        }
        try {
            val logger = Logger.getLogger("java.lang.Runtime")
            val level = logger.level
            if (level == null || level.intValue() > Level.FINE.intValue()) {
                // Enabled for this handler only: nothing is printed by the parents' console handler.
                logger.level = Level.FINE
                logger.useParentHandlers = false
            }
            logger.addHandler(object : Handler() {
                override fun publish(record: LogRecord) {
                    val text = record.thrown?.message ?: record.message ?: return
                    val status = STATUS.find(text)?.groupValues?.get(1)?.toIntOrNull() ?: return
                    // A signal exits through the same path with 128 + the signal's number, from
                    // java.lang.Terminator: recorded apart, the program did not fail on its own.
                    if (record.thrown?.stackTrace?.any { it.className == "java.lang.Terminator" || it.className.startsWith("jdk.internal.misc.Signal") } == true) {
                        if (status != 0 && signalStatus == 0) signalStatus = status
                        return
                    }
                    if (status != 0 && exitStatus == 0) exitStatus = status
                }
                override fun flush() {}
                override fun close() {}
            })
            exitLogger = logger
        } catch (e: Exception) {
            // No java.logging module (a jlinked runtime without it): non-zero exits are not told apart.
        }
    }
}
