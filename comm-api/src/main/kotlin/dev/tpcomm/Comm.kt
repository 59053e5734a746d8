package dev.tpcomm

import java.util.ServiceLoader

/** Entry point: creates communicators from the backends on the classpath. */
public object Comm {
    /** Every backend factory on the classpath, highest priority first. */
    @JvmStatic
    public fun backends(): List<CommBackendFactory> =
        ServiceLoader.load(CommBackendFactory::class.java, Comm::class.java.classLoader)
            .toList().sortedByDescending { it.priority }

    /**
     * Creates this process's communicator on [backend] (`"auto"`: the highest-priority available one).
     * Collective across the ranks described by [config].
     *
     * @throws BackendUnavailableException when the named backend is not on the classpath or cannot
     * run here, saying which backends exist and why each is unavailable.
     */
    public suspend fun create(backend: String = "auto", config: CommConfig = CommConfig.fromEnvironment()): Communicator {
        val all = backends()
        if (backend == "auto") {
            val chosen = all.firstOrNull { it.isAvailable() }
                ?: throw BackendUnavailableException(
                    "auto",
                    "no backend is available; tried: " + all.joinToString { "${it.name} (${it.unavailableReason() ?: "unavailable"})" } +
                        ". Add comm-coroutines to the classpath for the in-process backend.",
                )
            return chosen.create(config)
        }
        val factory = all.firstOrNull { it.name == backend }
            ?: throw BackendUnavailableException(
                backend,
                "no backend named '$backend' on the classpath; found: ${all.joinToString { it.name }.ifEmpty { "none" }}. " +
                    "Add the module dev.tpcomm:comm-$backend to the classpath.",
            )
        return factory.create(config)
    }
}
