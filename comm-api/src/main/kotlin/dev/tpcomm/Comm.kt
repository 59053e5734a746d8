package dev.tpcomm

import dev.tpcomm.spi.CommunicationErrors
import java.util.ServiceLoader

/** Entry point: creates communicators from the backends on the classpath. */
public object Comm {
    /** Every backend factory on the classpath, highest priority first. */
    @JvmStatic
    public fun backends(): List<CommBackendFactory> =
        ServiceLoader.load(CommBackendFactory::class.java, Comm::class.java.classLoader)
            .toList().sortedByDescending { it.priority }

    /** The backends tpcomm ships, by name, with the module (Maven coordinates) that provides each. */
    private val KNOWN_MODULES: Map<String, String> = linkedMapOf(
        "local" to "dev.tpcomm:comm-coroutines",
        "mpi" to "dev.tpcomm:comm-mpi",
        "nccl" to "dev.tpcomm:comm-nccl",
        "rccl" to "dev.tpcomm:comm-rccl",
    )

    /**
     * Creates this process's communicator on [backend] (`"auto"`: the highest-priority available one;
     * never the in-process backend when the environment describes several processes, since it
     * spans one JVM).
     * Backend names are case-insensitive (`"MPI"` is `"mpi"`). Collective across the ranks described
     * by [config]. With a positive [CommConfig.warmUp] the new communicator first warms the JIT's
     * call path for that long (closed, and the failure rethrown, if the warm-up fails).
     *
     * @throws BackendUnavailableException when the named backend is not on the classpath or cannot
     * run here, saying which backends exist, which module provides a known one, and why each is
     * unavailable.
     */
    public suspend fun create(backend: String = "auto", config: CommConfig = CommConfig.fromEnvironment()): Communicator {
        val all = backends()
        if (backend.equals("auto", ignoreCase = true)) {
            // A backend that cannot serve this process says so through isAvailable: the in-process
            // backend, for one, is unavailable when the environment describes several processes.
            val chosen = all.firstOrNull { it.isAvailable() }
                ?: throw CommunicationErrors.unavailable(
                    "auto",
                    "no backend is available; tried: " + all.joinToString { "${it.name} (${it.unavailableReason() ?: "unavailable"})" } +
                        if (all.any { it.name == "local" }) "" else ". Add comm-coroutines to the classpath for the in-process backend.",
                )
            return warmed(chosen.create(config), config)
        }
        val factory = all.firstOrNull { it.name.equals(backend, ignoreCase = true) }
            ?: throw CommunicationErrors.unavailable(backend, missingBackendMessage(backend, all))
        return warmed(factory.create(config), config)
    }

    /** [comm] after [CommConfig.warmUp]'s warm-up ([WarmUp]); closed, and the failure rethrown, when the warm-up fails. */
    @OptIn(InternalTpcommApi::class)
    private suspend fun warmed(comm: Communicator, config: CommConfig): Communicator {
        if (!config.warmUp.isPositive()) return comm
        try {
            WarmUp.run(comm, config.warmUp)
        } catch (t: Throwable) {
            try {
                comm.close()
            } catch (c: Throwable) {
                t.addSuppressed(c)
            }
            throw t
        }
        return comm
    }

    private fun missingBackendMessage(backend: String, found: List<CommBackendFactory>): String {
        val known = KNOWN_MODULES.entries.joinToString { (name, module) -> "$name ($module)" }
        val module = KNOWN_MODULES[backend.lowercase()]
        val advice = if (module != null) {
            "Add the module $module to the classpath."
        } else {
            "Use one of the known backends: $known, or \"auto\"."
        }
        return "no backend named '$backend' on the classpath; found: ${found.joinToString { it.name }.ifEmpty { "none" }}. $advice" +
            if (module != null) " Known backends: $known." else ""
    }
}
