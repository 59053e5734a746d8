package dev.tpcomm.testkit

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.coroutines.runLocalWorld
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.withContext

/**
 * Worlds of the local backend (`runLocalWorld` from comm-coroutines), with the ranks on
 * `Dispatchers.Default` so their own work runs in parallel. A rank's exception aborts the world
 * and is rethrown once every rank has ended; cancelling the caller cancels the ranks.
 */
public object LocalWorldLauncher : WorldLauncher {
    override suspend fun <R> run(worldSize: Int, config: CommConfig, block: suspend (Communicator) -> R): List<R> =
        withContext(Dispatchers.Default) { runLocalWorld(worldSize, config, block) }
}
