package dev.tpcomm.testkit

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import io.kotest.common.ExperimentalKotest
import io.kotest.core.spec.style.FunSpec
import io.kotest.property.Arb
import io.kotest.property.PropTestConfig
import io.kotest.property.arbitrary.int
import io.kotest.property.arbitrary.long
import io.kotest.property.checkAll
import kotlinx.coroutines.delay
import kotlinx.coroutines.withTimeout
import java.util.concurrent.atomic.AtomicReferenceArray
import kotlin.random.Random
import kotlin.time.Duration
import kotlin.time.Duration.Companion.seconds

/** Registers the in-process conformance tests of [ConformanceSpec]. */
internal class ConformanceSuite(private val launcher: WorldLauncher, private val options: ConformanceOptions) {
    private fun config(worldSize: Int, timeout: Duration) =
        CommConfig(worldSize = worldSize, timeout = timeout, checkConsistency = true)

    /** Runs [case] on every rank of a fresh world and fails with every rank's messages unless all passed. */
    private suspend fun runInWorld(case: ConformanceCase, worldSize: Int, seed: Long = options.seed) {
        val timeout = if (case.kind == CaseKind.Failure) options.failureTimeout else options.timeout
        val results = withTimeout(SpmdConformanceRunner.guard(case, options) + 10.seconds) {
            launcher.run(worldSize, config(worldSize, timeout)) { comm -> SpmdConformanceRunner.runCase(case, comm, options, seed) }
        }
        check(results.size == worldSize) { "the launcher returned ${results.size} results for a world of $worldSize" }
        val failed = results.filter { it.status == CaseResult.Status.Failed }
        if (failed.isNotEmpty()) throw AssertionError("${case.name} failed in a world of $worldSize:\n" + failed.joinToString("\n") { it.message ?: "" })
    }

    @OptIn(ExperimentalKotest::class)
    private val propertyConfig: PropTestConfig
        get() = if (options.propertySeed != null) PropTestConfig(seed = options.propertySeed) else PropTestConfig()

    private suspend fun scenarioProperty(kinds: List<Collective>) {
        checkAll(options.propertyIterations, propertyConfig, Arb.int(1..options.maxWorldSize), Arb.long()) { worldSize, seed ->
            val scenario = ScenarioGenerator.next(Random(seed), worldSize, options, kinds)
            val failures = withTimeout(options.timeout + 30.seconds) {
                launcher.run(worldSize, config(worldSize, options.timeout)) { comm ->
                    val ctx = CaseContext(seed, options)
                    ScenarioRunner.run(comm, scenario, ctx)
                    ctx.failures.map { "rank ${comm.rank}: $it" }
                }
            }.flatten()
            if (failures.isNotEmpty()) throw AssertionError("world of $worldSize, seed $seed, $scenario:\n" + failures.joinToString("\n"))
        }
    }

    private suspend fun caseProperty(case: ConformanceCase) {
        checkAll(options.propertyIterations, propertyConfig, Arb.int(1..options.maxWorldSize), Arb.long()) { worldSize, seed ->
            if (case.whyNotRun(options, worldSize) == null) runInWorld(case, worldSize, seed)
        }
    }

    fun register(spec: FunSpec): Unit = with(spec) {
        val cases = ConformanceCases.all.filter { it.kind != CaseKind.Soak }
        // Flat test names (no containers): Surefire then counts every test in the report's header.
        for (n in options.effectiveWorldSizes) {
            for (case in cases) {
                if (case.whyNotRun(options, n) != null) {
                    xtest("[world of $n] ${case.name} (skipped: ${case.whyNotRun(options, n)})") {}
                } else {
                    test("[world of $n] ${case.name}").config(timeout = SpmdConformanceRunner.guard(case, options) + 20.seconds) { runInWorld(case, n) }
                }
            }
        }

        run {
            val propertyTimeout = (options.timeout + 30.seconds) * 2 + 60.seconds
            val properties = listOf(
                "allReduce equals the sequential reference" to listOf(Collective.AllReduce),
                "broadcast delivers the root's tensor" to listOf(Collective.Broadcast),
                "reduce equals the reference on the root and leaves the others unchanged" to listOf(Collective.Reduce),
                "allGather then chunk gives back the inputs" to listOf(Collective.AllGather),
                "reduceScatter equals the reference and the chunk of an allReduce" to listOf(Collective.ReduceScatter),
                "gather and scatter move the right chunks" to listOf(Collective.Gather, Collective.Scatter),
                "allToAll exchanges chunk i with rank i" to listOf(Collective.AllToAll),
            )
            for ((name, kinds) in properties) {
                test("property: $name").config(timeout = propertyTimeout) { scenarioProperty(kinds) }
            }
            val caseProperties = listOf(
                "split: colors and keys order the sub-communicators",
                "split: a null color is not a member and its buffers stay unchanged",
                "group: members only, in the given order; the parent stays usable",
                "object collectives: data classes round-trip",
            ).map { ConformanceCases.named(it) }
            for (case in caseProperties) {
                if (case.whyNotRun(options, options.maxWorldSize) == null) {
                    test("property: ${case.name}").config(timeout = propertyTimeout) { caseProperty(case) }
                }
            }
        }

        run {
            for (n in options.effectiveWorldSizes.filter { it >= 2 }) {
                test("[world of $n] failure: an exception in one rank's code ends every rank").config(timeout = options.failureTimeout * 6 + 20.seconds) {
                    exceptionInOneRank(n)
                }
            }
        }

        val soak = ConformanceCases.named("soak")
        test("soak: ${options.soakCollectives} random collectives, ${options.soakConcurrency} in flight per rank, ${options.soakWorldSize} ranks")
            .config(timeout = SpmdConformanceRunner.guard(soak, options) + 20.seconds) { runInWorld(soak, options.soakWorldSize) }
    }

    /** Thrown by one rank's code in [exceptionInOneRank]. */
    private class RankFailure(message: String) : RuntimeException(message)

    /**
     * One rank throws from its own code while the others wait in an allReduce: the launcher must
     * end (rethrowing the failure) and every other rank's pending call must fail with a
     * [CommunicationException] within twice the timeout.
     */
    private suspend fun exceptionInOneRank(n: Int) {
        val victim = n / 2
        val timeout = options.failureTimeout
        val outcomes = AtomicReferenceArray<Attempt>(n)
        val started = System.nanoTime()
        val thrown = attempt {
            withTimeout(timeout * 4 + 10.seconds) {
                launcher.run(n, config(n, timeout)) { comm ->
                    if (comm.rank == victim) {
                        delay(timeout / 4)
                        throw RankFailure("rank $victim fails on purpose")
                    }
                    val t = options.placement.toBackend(dev.tpcomm.Tensor.of(floatArrayOf(1f, 2f)))
                    outcomes.set(comm.rank, attempt { comm.allReduce(t) })
                }
            }
        }
        val elapsed = (System.nanoTime() - started) / 1_000_000
        val problems = mutableListOf<String>()
        val e = thrown.error
        if (e == null) problems += "the launcher returned normally although rank $victim threw"
        else if (e.chain().none { it is RankFailure }) problems += "the launcher threw ${e.describe()}, not rank $victim's RankFailure"
        val limit = 2 * timeout.inWholeMilliseconds
        for (r in 0 until n) {
            if (r == victim) continue
            val o = outcomes.get(r)
            when {
                o == null -> problems += "rank $r's pending allReduce did not end with an exception (its coroutine was cancelled or never finished)"
                o.error == null -> problems += "rank $r's allReduce returned normally although rank $victim never called it"
                o.error !is CommunicationException -> problems += "rank $r's allReduce failed with ${o.error.describe()}, expected a CommunicationException"
                o.elapsedMillis > limit -> problems += "rank $r's allReduce failed after ${o.elapsedMillis} ms, more than twice the timeout ($limit ms)"
            }
        }
        if (elapsed > limit + timeout.inWholeMilliseconds) problems += "the world took $elapsed ms to end"
        if (problems.isNotEmpty()) throw AssertionError("an exception in rank $victim of $n:\n" + problems.joinToString("\n") { "  - $it" })
    }
}
