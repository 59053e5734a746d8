package dev.tpcomm.coroutines

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.WarmUp
import dev.tpcomm.coroutines.local.LocalBackend
import dev.tpcomm.engine.CommunicatorFront
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.Deferred
import kotlinx.coroutines.ExperimentalCoroutinesApi
import kotlinx.coroutines.async
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.supervisorScope
import java.util.concurrent.atomic.AtomicReference
import kotlin.time.Duration
import kotlin.time.Duration.Companion.seconds

/**
 * Runs [block] once per rank of a new in-process world of [worldSize] ranks, each as a coroutine
 * (children of the caller, in the caller's dispatcher: use `withContext(Dispatchers.Default)` to run
 * ranks' own computation in parallel), and returns the results in rank order.
 *
 * Structured, and never left waiting on a failed world: when one rank's block throws, the world is
 * aborted at once, so the other ranks' pending and later calls fail with a named
 * `CommunicationException` instead of hanging; a rank still running one second (or
 * [CommConfig.timeout] if shorter) after that is cancelled, wherever it waits: outside any
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
 * See [LocalWorld] for the semantics of the communicators. With a positive [CommConfig.warmUp] each
 * rank's communicator warms the JIT's call path for that long before the rank's [block] starts (a
 * failure of the warm-up is that rank's failure).
 */
@OptIn(InternalTpcommApi::class)
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
            val firstFailedRank = CompletableDeferred<Int>()
            lateinit var ranks: List<Deferred<R>>
            ranks = List(worldSize) { r ->
                async(start = CoroutineStart.LAZY) {
                    val comm = world.communicator(r)
                    try {
                        WarmUp.run(comm, config.warmUp)
                        block(comm).also {
                            // A rank that is done can no longer take part: peers that wait for it fail at once.
                            ((comm as? CommunicatorFront)?.backend as? LocalBackend)?.closeTree()
                        }
                    } catch (t: Throwable) {
                        if (first.compareAndSet(null, t)) {
                            world.abort(t)
                            firstFailedRank.complete(r)
                        }
                        throw t
                    }
                }
            }
            for (d in ranks) d.start()
            // Ranks in or entering a collective end by themselves with a named exception once the world is
            // aborted; the grace lets them, then whatever still runs (waiting outside any collective) is cancelled.
            val reaper = launch {
                val r = firstFailedRank.await()
                delay(minOf(config.timeout, CANCEL_GRACE_MAX))
                val stop = CancellationException("runLocalWorld: rank $r failed, so the ranks still running are cancelled: ${first.get()}", first.get())
                for ((i, d) in ranks.withIndex()) if (i != r) d.cancel(stop)
            }
            for (d in ranks) d.join()
            reaper.cancel()
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

/**
 * How long [runLocalWorld] lets the other ranks end by themselves after the first failure before it
 * cancels those still running (at most the world's timeout).
 */
private val CANCEL_GRACE_MAX: Duration = 1.seconds
