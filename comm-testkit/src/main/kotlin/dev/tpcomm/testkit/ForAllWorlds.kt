package dev.tpcomm.testkit

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.Communicator
import dev.tpcomm.Tensor
import io.kotest.property.Arb
import io.kotest.property.RandomSource
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.TimeoutCancellationException
import kotlinx.coroutines.currentCoroutineContext
import kotlinx.coroutines.ensureActive
import kotlinx.coroutines.isActive
import kotlinx.coroutines.withTimeout
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicInteger
import kotlin.random.Random
import kotlin.time.Duration.Companion.seconds

/**
 * Runs [property] on every rank of in-process worlds of the sizes in [WorldCheckConfig.worldSizes]
 * ([WorldCheckConfig.iterations] worlds, each fresh), as a property test of SPMD code:
 *
 * ```
 * test("my layer's ranks agree") {
 *     forAllWorlds { comm -> comm.allReduce(Tensor.of(floatArrayOf(1f))).getFloat(0) shouldBe comm.worldSize.toFloat() }
 * }
 * ```
 *
 * A rank fails when its block throws (a Kotest assertion, any exception); the world is then aborted,
 * so the other ranks' pending collectives fail with a `CommunicationException` instead of waiting.
 * On failure, the same seed is re-run on each smaller configured world size, and a
 * [WorldPropertyException] reports the smallest world that still fails: which rank failed (the
 * lowest rank whose own code failed, not the first in time, so that one seed gives one report) and
 * with what, what the others ended with, and the seed to reproduce. A world still running after
 * `2 * timeout + 10 s` is cancelled and reported with its hung ranks (this needs the property's
 * waiting to be cancellable, as tpcomm's collectives and `delay` are; a rank stuck in
 * `Thread.sleep` or a non-interruptible lock holds its world until it returns).
 *
 * Suspends until done; cancelling the caller cancels the running world. Not thread-confined: call
 * it from any coroutine (a Kotest test, `runBlocking` in a JUnit test).
 */
public suspend fun forAllWorlds(
    config: WorldCheckConfig = WorldCheckConfig(),
    property: suspend (comm: Communicator) -> Unit,
): Unit = WorldCheck(config).run({ null }) { comm, _: Any? -> property(comm) }

/**
 * [forAllWorlds] with an [input] drawn from a Kotest [Arb] per world. Every rank of a world gets the
 * same value (as every rank of an SPMD program starts from the same seed), so ranks can each take
 * their shard of it; the value is drawn again for each world, and, while shrinking, drawn with the
 * same seed for each smaller world.
 */
public suspend fun <A> forAllWorlds(
    input: Arb<A>,
    config: WorldCheckConfig = WorldCheckConfig(),
    property: suspend (comm: Communicator, input: A) -> Unit,
): Unit = WorldCheck(config).run({ input }, property)

/**
 * [forAllWorlds] with an input whose generator depends on the world size, for inputs that must
 * divide among the ranks (a weight whose columns split evenly, a batch of `worldSize * k` rows):
 *
 * ```
 * forAllWorlds(input = { n -> Arb.tensor(DType.Float32, listOf(4, 2 * n)) }) { comm, w -> ... }
 * ```
 */
public suspend fun <A> forAllWorlds(
    config: WorldCheckConfig = WorldCheckConfig(),
    input: (worldSize: Int) -> Arb<A>,
    property: suspend (comm: Communicator, input: A) -> Unit,
): Unit = WorldCheck(config).run(input, property)

/** The engine behind [forAllWorlds]. */
internal class WorldCheck(private val config: WorldCheckConfig) {
    /** How one world ended. */
    class Outcome(
        val worldSize: Int,
        val input: Any?,
        /** Rank to (order of failure, exception); rank -1 for the launcher's own failure. */
        val failures: Map<Int, Pair<Int, Throwable>>,
        val hung: List<Int>,
    ) {
        val failed: Boolean get() = failures.isNotEmpty() || hung.isNotEmpty()
        /**
         * The failure the report leads with, chosen from what failed, never from timing (the same
         * seed gives the same report): the lowest rank whose own code failed (an exception that is
         * not a [CommunicationException]); else the lowest rank with a timeout or mismatch; else the
         * lowest rank that failed at all; the launcher's own failure (rank -1) only when no rank failed.
         */
        val first: Pair<Int, Throwable>?
            get() {
                val ranks = failures.entries.filter { it.key >= 0 }.sortedBy { it.key }
                val lead = ranks.firstOrNull { it.value.second !is CommunicationException }
                    ?: ranks.firstOrNull { it.value.second is CommunicationTimeoutException || it.value.second is CollectiveMismatchException }
                    ?: ranks.firstOrNull()
                    ?: failures.entries.firstOrNull()
                return lead?.let { it.key to it.value.second }
            }
    }

    private val seed: Long = config.seed ?: System.getProperty("tpcomm.testkit.seed")?.toLongOrNull() ?: Random.nextLong()

    suspend fun <A> run(input: (Int) -> Arb<A>?, property: suspend (Communicator, A) -> Unit) {
        val sizes = config.worldSizes.distinct().sorted()
        val random = Random(seed)
        for (iteration in 0 until config.iterations) {
            val worldSize = if (iteration == 0) sizes.last() else sizes[random.nextInt(sizes.size)]
            val iterationSeed = random.nextLong()
            val outcome = world(worldSize, iterationSeed, input, property)
            if (!outcome.failed) continue
            val tried = mutableListOf(worldSize to true)
            var smallest = outcome
            for (smaller in sizes.filter { it < worldSize }) {
                val o = world(smaller, iterationSeed, input, property)
                tried += smaller to o.failed
                if (o.failed) { smallest = o; break }
            }
            throw report(smallest, outcome.worldSize, iteration, tried.sortedBy { it.first })
        }
    }

    private suspend fun <A> world(worldSize: Int, iterationSeed: Long, input: (Int) -> Arb<A>?, property: suspend (Communicator, A) -> Unit): Outcome {
        @Suppress("UNCHECKED_CAST")
        val value = input(worldSize)?.sample(RandomSource.seeded(iterationSeed))?.value as A
        val failures = ConcurrentHashMap<Int, Pair<Int, Throwable>>()
        val order = AtomicInteger()
        val done = ConcurrentHashMap.newKeySet<Int>()
        val commConfig = CommConfig(worldSize = worldSize, timeout = config.timeout, checkConsistency = config.checkConsistency)
        try {
            withTimeout(config.timeout * 2 + 10.seconds) {
                config.launcher.run(worldSize, commConfig) { comm ->
                    try {
                        property(comm, value)
                        done += comm.rank
                    } catch (t: Throwable) {
                        // Cancelled from outside (the world's deadline): this rank hung; it did not fail.
                        if (t is CancellationException && !currentCoroutineContext().isActive) throw t
                        failures.putIfAbsent(comm.rank, order.getAndIncrement() to t)
                        done += comm.rank
                        throw t
                    }
                }
            }
        } catch (e: TimeoutCancellationException) {
            currentCoroutineContext().ensureActive()
        } catch (e: CancellationException) {
            throw e
        } catch (t: Throwable) {
            // The rank's exception rethrown by the launcher: already recorded. Anything else is the launcher's own.
            if (failures.values.none { it.second === t }) failures.putIfAbsent(-1, order.getAndIncrement() to t)
        }
        val hung = (0 until worldSize).filter { it !in done }
        return Outcome(worldSize, value, failures.toMap(), hung)
    }

    private fun describe(t: Throwable): String = "${t.javaClass.simpleName.ifEmpty { t.javaClass.name }}: ${t.message}"

    private fun describeInput(value: Any?): String {
        val text = when (value) {
            is Tensor -> TensorFormat.describe(value)
            is Collection<*> -> value.joinToString(", ", "[", "]") { if (it is Tensor) TensorFormat.describe(it) else it.toString() }
            is Pair<*, *> -> "(${describeInput(value.first)}, ${describeInput(value.second)})"
            else -> value.toString()
        }
        return if (text.length > 2000) text.take(2000) + "... (${text.length} characters)" else text
    }

    private fun report(o: Outcome, firstWorldSize: Int, iteration: Int, tried: List<Pair<Int, Boolean>>): WorldPropertyException {
        val first = o.first
        val lines = mutableListOf<String>()
        val headline = when {
            first != null && first.first >= 0 -> "rank ${first.first} failed: ${describe(first.second)}"
            first != null -> "the launcher failed: ${describe(first.second)}"
            else -> "ranks ${o.hung} hung (still running after ${config.timeout * 2 + 10.seconds})"
        }
        lines += "forAllWorlds: the property failed in a world of ${o.worldSize} ranks" +
            (if (o.worldSize != firstWorldSize) " (shrunk from the world of $firstWorldSize ranks that failed first)" else "") +
            "; $headline"
        for (r in 0 until o.worldSize) {
            if (first != null && r == first.first) continue
            val f = o.failures[r]
            lines += when {
                f != null -> "  rank $r: ${describe(f.second)}" +
                    if (f.second is CommunicationException && first != null && first.first >= 0) " (ended because rank ${first.first} failed)" else ""
                r in o.hung -> "  rank $r: hung (still running when the world was cancelled)"
                else -> "  rank $r: passed"
            }
        }
        if (first != null && first.first >= 0 && o.hung.isNotEmpty()) lines += "  hung: ranks ${o.hung}"
        if (o.input != null) lines += "input: ${describeInput(o.input)}"
        lines += "world sizes tried: " + tried.joinToString(", ") { (n, failed) -> "$n ${if (failed) "failed" else "passed"}" } +
            " (iteration ${iteration + 1} of ${config.iterations})"
        lines += "reproduce with WorldCheckConfig(seed = ${seed}L) or -Dtpcomm.testkit.seed=$seed"
        return WorldPropertyException(
            lines.joinToString("\n"),
            first?.second,
            worldSize = o.worldSize,
            firstFailedWorldSize = firstWorldSize,
            failedRank = first?.first?.takeIf { it >= 0 } ?: -1,
            rankFailures = o.failures.filterKeys { it >= 0 }.mapValues { it.value.second },
            hungRanks = o.hung,
            input = o.input,
            seed = seed,
        )
    }
}

/** Short descriptions of tensors for failure messages. */
internal object TensorFormat {
    fun describe(t: Tensor, max: Int = 8): String {
        if (t.isClosed) return "${t.dtype}${t.shape} (closed)"
        val n = minOf(t.numel, max.toLong())
        val values = (0 until n).joinToString(", ") { i -> TensorComparison.show(t, i) }
        return "${t.dtype}${t.shape} [${values}${if (t.numel > n) ", ... (${t.numel} elements)" else ""}]"
    }
}
