package dev.tpcomm.coroutines

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.coroutines.local.LocalCommunicator
import kotlinx.coroutines.ExperimentalCoroutinesApi
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
 * ranks end: each rank's communicator (and those it split from it) is closed as soon as its block
 * returns, so a rank still waiting for it in a collective or a receive fails at once with
 * `CommunicatorAbortedException` instead of waiting for the timeout. See [LocalWorld] for the semantics of the communicators.
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
                    val comm = world.communicator(r)
                    try {
                        block(comm).also {
                            // A rank that is done can no longer take part: peers that wait for it fail at once.
                            (comm as? LocalCommunicator)?.closeTree()
                        }
                    } catch (t: Throwable) {
                        world.abort(t)
                        throw t
                    }
                }
            }
            for (d in ranks) d.join()
            // The exceptions as thrown (await() may hand out copies made for stack-trace recovery).
            @OptIn(ExperimentalCoroutinesApi::class)
            val failures = ranks.mapNotNull { it.getCompletionExceptionOrNull() }
            if (failures.isEmpty()) {
                @OptIn(ExperimentalCoroutinesApi::class)
                ranks.map { it.getCompleted() }
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
