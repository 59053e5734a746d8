package dev.tpcomm.mpi

import dev.tpcomm.spi.CommunicationErrors
import java.io.File
import java.util.concurrent.LinkedBlockingQueue
import java.util.concurrent.TimeUnit

/**
 * Open MPI's `ompi-server` (package `openmpi-bin`), which rank 0 starts for a world formed without
 * `mpirun` ([MpiStoreWorld]): the data server through which processes of different Open MPI jobs
 * (here: singletons) publish and look up the names behind `MPI_Comm_accept`/`MPI_Comm_connect`.
 * Open MPI 4.1 refuses to connect two jobs without it (`ompi/mca/rte/orte/rte_orte_module.c`,
 * `ompi_rte_connect_accept_support`: "orterun:server-unavailable" when the MCA parameter
 * `pmix_server_uri` is unset).
 *
 * The server runs `--no-daemonize -r +` (its URI on its standard error, which is unbuffered: on
 * a pipe, `-r -` holds the URI in stdio's buffer until the server exits) under a small `sh` that
 * holds a pipe from this JVM and kills the server when that pipe closes: when this process ends in
 * any way, `kill -9` included, the server ends with it. It serves the job for as long as rank 0 lives.
 */
internal object OmpiServer {
    /** The variable naming the `ompi-server` to run (else the `PATH`'s). */
    const val PATH_VARIABLE = "TPCOMM_OMPI_SERVER"

    @Volatile private var running: Pair<Process, String>? = null

    /** The `ompi-server` to run: [PATH_VARIABLE], else the first on `PATH`; null when there is none. */
    fun locate(env: Map<String, String>): File? {
        env[PATH_VARIABLE]?.takeIf { it.isNotBlank() }?.let { return File(it).takeIf { f -> f.canExecute() } }
        return env["PATH"].orEmpty().split(File.pathSeparatorChar).filter { it.isNotEmpty() }
            .map { File(it, "ompi-server") }.firstOrNull { it.canExecute() }
    }

    /**
     * Starts the server (once per process) and returns its URI (`<jobid>.0;tcp://addr:port;...`),
     * the value Open MPI's `pmix_server_uri` takes as it is (`orte/orted/pmix/pmix_server_pub.c`,
     * `init_server`: a value not starting with `file:` is the URI itself).
     *
     * @throws dev.tpcomm.BackendUnavailableException when there is no `ompi-server`, or it did not
     * print its URI within [timeoutMillis] (its output is in the message).
     */
    @Synchronized
    fun start(env: Map<String, String>, timeoutMillis: Long): String {
        running?.let { (p, uri) -> if (p.isAlive) return uri }
        val server = locate(env) ?: throw CommunicationErrors.unavailable(
            "mpi",
            "rank 0 cannot start ompi-server: " + (
                env[PATH_VARIABLE]?.takeIf { it.isNotBlank() }?.let { "$PATH_VARIABLE=$it is not an executable file" }
                    ?: "there is no ompi-server on PATH"
                ) + ". A world formed without mpirun needs Open MPI's ompi-server on the host of rank 0: install openmpi-bin " +
                "(Debian, Ubuntu) or set $PATH_VARIABLE to its path; or launch the job with mpirun",
        )
        // sh keeps the server's pid; when this JVM's end of its stdin closes, it kills the server.
        val script = "\"\$0\" --no-daemonize -r + </dev/null 2>&1 & p=\$!; while read -r _; do :; done; kill \$p 2>/dev/null; wait \$p"
        val pb = ProcessBuilder("sh", "-c", script, server.path).redirectErrorStream(true)
        if (System.getProperty("user.name") == "root") {
            // ompi-server, like mpirun, refuses to run as root unless told (containers often run as root).
            pb.environment()["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
            pb.environment()["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
        }
        val process = pb.start()
        val lines = LinkedBlockingQueue<String>()
        val output = StringBuilder()
        Thread.ofPlatform().daemon(true).name("tpcomm-ompi-server-output").start {
            process.inputStream.bufferedReader().useLines { seq -> seq.forEach { lines.put(it) } }
            lines.put(END)
        }
        val deadline = System.nanoTime() + timeoutMillis * 1_000_000
        while (true) {
            val line = lines.poll((deadline - System.nanoTime()).coerceAtLeast(0), TimeUnit.NANOSECONDS)
            if (line == null || line === END) break
            if (URI.matches(line.trim())) {
                val uri = line.trim()
                running = process to uri
                // Keep draining its output, so the server never blocks on a full pipe.
                Thread.ofPlatform().daemon(true).name("tpcomm-ompi-server-drain").start { while (lines.take() !== END) Unit }
                return uri
            }
            output.appendLine(line)
        }
        process.outputStream.close()
        process.destroy()
        throw CommunicationErrors.unavailable(
            "mpi",
            "rank 0 started ${server.path}, but it printed no URI within $timeoutMillis ms" +
                (if (output.isNotBlank()) "; it said: ${output.toString().trim().take(2000)}" else "") +
                ". Check that Open MPI's ompi-server runs on this host (as root it needs OMPI_ALLOW_RUN_AS_ROOT=1 and " +
                "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, which tpcomm sets), or launch the job with mpirun",
        )
    }

    /** `1575550976.0;tcp://192.0.2.2:38931;...`: an ORTE process name, then its contact addresses. */
    private val URI = Regex("^\\d+\\.\\d+;[a-z0-9]+://.+")

    private const val END = "\u0000end"
}
