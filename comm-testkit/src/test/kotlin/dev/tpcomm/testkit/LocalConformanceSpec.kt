package dev.tpcomm.testkit

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.coroutines.runLocalWorld
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.withContext

/** Ranks of the local backend, on `Dispatchers.Default` so the ranks' own work runs in parallel. */
internal object LocalWorldLauncher : WorldLauncher {
    override suspend fun <R> run(worldSize: Int, config: CommConfig, block: suspend (Communicator) -> R): List<R> =
        withContext(Dispatchers.Default) { runLocalWorld(worldSize, config, block) }
}

/** The full conformance suite against the local backend (comm-coroutines). */
class LocalConformanceSpec : ConformanceSpec(LocalWorldLauncher)
