package dev.tpcomm.coroutines

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.coroutines.local.LocalCommunicator
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.Deferred
import kotlinx.coroutines.ExperimentalCoroutinesApi
import kotlinx.coroutines.async
import kotlinx.coroutines.supervisorScope
import java.util.concurrent.atomic.AtomicReference

/**
 * Runs [block] once per rank of a new in-process world of [worldSize] ranks, each as a coroutine
 * (children of the caller, in the caller's dispatcher: use `withContext(Dispatchers.Default)` to run
 * ranks' own computation in parallel), and returns the results in rank order.
 *
 * Structured, and never left waiting on a failed world: when one rank's block throws, the world is
 * aborted at once (the other ranks' pending and later calls fail with a `CommunicationException`
 * instead of hanging) and every rank still running is cancelled, wherever it waits: outside any
 * collective too (`awaitCancellation()`, a `yield()` loop, a hand-off from the rank that threw).
 * Then the FIRST exception thrown by a rank is rethrown (a rank's `CommunicationTimeoutException`
 * within [CommConfig.timeout] when another rank never arrives), with the other ranks' exceptions
 * other than their cancellation attached as suppressed. A rank that ignores cancellation (blocks its
 * thread without suspending) delays the return until it stops. If the caller is cancelled, the ranks
 * are cancelled and the world aborts.
 *
 * The communicators are closed when the ranks end: each rank's communicator (and those it split
 * from it) is closed as soon as its block returns, so a rank still waiting for it in a collective or
 * a receive fails at once with `CommunicatorAbortedException` instead of waiting for the timeout.
 * See [LocalWorld] for the semantics of the communicators.
 */
public suspend fun <R> runLocalWorld(
    worldSize: Int,
    config: CommConfig = CommConfig(),
    block: suspend (Communicator) -> R,
): List<R> {
    val world = LocalWorld(worldSize, config)
    try {
        return supervisorScope {
            // The first exception thrown by a rank, in time; the ranks cancelled because of it do not replace it.
            val first = AtomicReference<Throwable?>(null)
            lateinit var ranks: List<Deferred<R>>
            ranks = List(worldSize) { r ->
                async(start = CoroutineStart.LAZY) {
                    val comm = world.communicator(r)
                    try {
                        block(comm).also {
                            // A rank that is done can no longer take part: peers that wait for it fail at once.
                            (comm as? LocalCommunicator)?.closeTree()
                        }
                    } catch (t: Throwable) {
                        if (first.compareAndSet(null, t)) {
                            world.abort(t)
                            val stop = CancellationException("runLocalWorld: rank $r failed, so the other ranks are cancelled: $t", t)
                            for ((i, d) in ranks.withIndex()) if (i != r) d.cancel(stop)
                        }
                        throw t
                    }
                }
            }
            for (d in ranks) d.start()
            for (d in ranks) d.join()
            // The exceptions as thrown (await() may hand out copies made for stack-trace recovery).
            @OptIn(ExperimentalCoroutinesApi::class)
            val failures = ranks.mapNotNull { it.getCompletionExceptionOrNull() }
            if (failures.isEmpty()) {
                @OptIn(ExperimentalCoroutinesApi::class)
                ranks.map { it.getCompleted() }
            } else {
                val original = first.get()?.takeIf { c -> failures.any { it === c } } ?: failures.first()
                for (f in failures) {
                    if (f !== original && f !is CancellationException && original.suppressed.none { it === f }) original.addSuppressed(f)
                }
                throw original
            }
        }
    } finally {
        world.close()
    }
}
