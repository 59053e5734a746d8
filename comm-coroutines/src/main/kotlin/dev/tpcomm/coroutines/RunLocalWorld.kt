package dev.tpcomm.coroutines

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import kotlinx.coroutines.async
import kotlinx.coroutines.supervisorScope

/**
 * Runs [block] once per rank of a new in-process world of [worldSize] ranks, each as a coroutine
 * (children of the caller, in the caller's dispatcher: use `withContext(Dispatchers.Default)` to run
 * ranks' own computation in parallel), and returns the results in rank order.
 *
 * Structured: if one rank's block throws, the world is aborted at once so the other ranks' pending
 * and later calls fail with a `CommunicationException` instead of hanging, and that original
 * exception is rethrown (the other ranks' exceptions attached as suppressed). If the caller is
 * cancelled, the ranks are cancelled and the world aborts. The communicators are closed when the
 * ranks end. See [LocalWorld] for the semantics of the communicators.
 */
public suspend fun <R> runLocalWorld(
    worldSize: Int,
    config: CommConfig = CommConfig(),
    block: suspend (Communicator) -> R,
): List<R> {
    val world = LocalWorld(worldSize, config)
    try {
        return supervisorScope {
            val ranks = List(worldSize) { r ->
                async {
                    try {
                        block(world.communicator(r))
                    } catch (t: Throwable) {
                        world.abort(t)
                        throw t
                    }
                }
            }
            val outcomes = ranks.map { runCatching { it.await() } }
            val failures = outcomes.mapNotNull { it.exceptionOrNull() }
            if (failures.isEmpty()) {
                @Suppress("UNCHECKED_CAST")
                outcomes.map { it.getOrNull() as R }
            } else {
                val original = world.abortCause?.takeIf { c -> failures.any { it === c } } ?: failures.first()
                for (f in failures) if (f !== original && original.suppressed.none { it === f }) original.addSuppressed(f)
                throw original
            }
        }
    } finally {
        world.close()
    }
}
