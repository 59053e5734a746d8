package dev.tpcomm.testkit

import dev.tpcomm.Communicator
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.TimeoutCancellationException
import kotlinx.coroutines.currentCoroutineContext
import kotlinx.coroutines.isActive
import kotlinx.coroutines.withTimeout
import kotlin.time.Duration
import kotlin.time.Duration.Companion.minutes
import kotlin.time.Duration.Companion.seconds

/**
 * Runs [ConformanceCases] on one rank of an SPMD world: every rank of, say, an `mpirun` job
 * calls [run] with its communicator and the same options, and gets its own per-case results.
 *
 * Cases run in order: [CaseKind.Collective] cases on [run]'s communicator, then the
 * [CaseKind.Failure] cases, each on a fresh communicator from a [ScratchCommunicatorFactory] (they
 * abort their communicator on purpose; without a factory they are reported skipped) after a
 * barrier on the main communicator that lines the ranks up, then the soak
 * when the filter admits it. Every case runs under a guard timeout, so a hang fails the case
 * (cancelling its calls, which aborts the communicator) instead of hanging the process; a case that
 * throws or records a wrong result fails without stopping the run; one that leaves the shared
 * communicator aborted is followed by a fresh one from the [ScratchCommunicatorFactory], when there is
 * one, so that later cases are not failed by it (reported as a failed result of its own; the
 * returned list holds the cases' results only). Not thread-safe: one run per communicator at a time.
 */
public object SpmdConformanceRunner {
    /** The default filter: every case but the soak. */
    public val notSoak: (ConformanceCase) -> Boolean = { it.kind != CaseKind.Soak }

    /**
     * Runs the cases [filter] admits on [comm] and returns one result per case, calling [report]
     * as each finishes. Every rank must pass the same [filter], [options] and [cases].
     */
    public suspend fun run(
        comm: Communicator,
        filter: (ConformanceCase) -> Boolean = notSoak,
        report: (CaseResult) -> Unit = {},
        options: ConformanceOptions = ConformanceOptions(),
        scratch: ScratchCommunicatorFactory? = null,
        cases: List<ConformanceCase> = ConformanceCases.all,
    ): List<CaseResult> {
        val ordered = cases.filter(filter).sortedBy { it.kind.ordinal }
        val results = ArrayList<CaseResult>(ordered.size)
        var current = comm
        try {
            for (case in ordered) {
                val result = if (case.kind == CaseKind.Failure && case.whyNotRun(options, current.worldSize) == null) {
                    runOnScratch(case, current, options, scratch)
                } else {
                    runCase(case, current, options)
                }
                results += result
                report(result)
                if (current.isAborted && scratch != null) {
                    current = replace(current, comm, case, options, scratch, report) ?: current
                }
            }
        } finally {
            if (current !== comm) runCatching { current.close() }
        }
        return results
    }

    /**
     * A case failed so that it aborted the communicator the cases share (a defect of the backend,
     * since a correct collective case never aborts it): every later case would fail only because of
     * it. So that each defect shows on its own, the rest run on a fresh communicator from [scratch]
     * created with the cases' timeout, and the replacement is reported as a failed result of its
     * own naming the case. Returns null (the run goes on with the aborted one) when [scratch]
     * cannot make one, e.g. [ScratchCommunicatorFactory.Split] of an aborted parent.
     */
    private suspend fun replace(aborted: Communicator, original: Communicator, case: ConformanceCase, options: ConformanceOptions,
                                scratch: ScratchCommunicatorFactory, report: (CaseResult) -> Unit): Communicator? {
        val fresh = try {
            scratch.create(aborted, options.timeout)
        } catch (e: Throwable) {
            if (e is CancellationException && !currentCoroutineContext().isActive) throw e
            null
        }
        if (aborted !== original) runCatching { aborted.close() }
        report(CaseResult("(the shared communicator)", aborted.rank, aborted.worldSize, CaseResult.Status.Failed,
            "case '${case.name}' left it aborted; " +
                (if (fresh != null) "the cases after it run on a fresh communicator" else "no fresh communicator could be made, so the cases after it fail with it")))
        return fresh
    }

    private suspend fun runOnScratch(case: ConformanceCase, comm: Communicator, options: ConformanceOptions, scratch: ScratchCommunicatorFactory?): CaseResult {
        if (scratch == null) {
            return CaseResult(case.name, comm.rank, comm.worldSize, CaseResult.Status.Skipped,
                "failure cases abort their communicator: pass a ScratchCommunicatorFactory to run them")
        }
        val start = System.nanoTime()
        val fresh = try {
            // Line the ranks up first: the previous failure case may end at different times on
            // different ranks (a rank that "never calls" sleeps past the others' deadline).
            withTimeout(guard(case, options)) { comm.barrier() }
            scratch.create(comm, options.failureTimeout)
        } catch (e: Throwable) {
            if (e is CancellationException && !currentCoroutineContext().isActive) throw e
            return CaseResult(case.name, comm.rank, comm.worldSize, CaseResult.Status.Failed,
                "the barrier before the case or creating its scratch communicator failed: ${e.stackTraceToString()}", (System.nanoTime() - start) / 1_000_000)
        }
        try {
            return runCase(case, fresh, options)
        } finally {
            runCatching { fresh.close() }
        }
    }

    /** The guard timeout of [case]: past it the case is failed as hung. */
    public fun guard(case: ConformanceCase, options: ConformanceOptions): Duration = when (case.kind) {
        CaseKind.Failure -> options.failureTimeout * 6 + 10.seconds
        CaseKind.Collective -> options.timeout * 2 + 5.seconds
        CaseKind.Soak -> options.timeout + 10.minutes
    }

    /**
     * Runs one [case] on [comm] (as given: no scratch communicator) with a context seeded from
     * [seed] and the case's name, and returns this rank's result. Never throws but for the
     * cancellation of the calling coroutine.
     */
    public suspend fun runCase(case: ConformanceCase, comm: Communicator, options: ConformanceOptions, seed: Long = options.seed): CaseResult {
        val rank = comm.rank
        val size = comm.worldSize
        case.whyNotRun(options, size)?.let { return CaseResult(case.name, rank, size, CaseResult.Status.Skipped, it) }
        val ctx = CaseContext(TestData.mix(seed, case.name.hashCode().toLong(), 0), options)
        val start = System.nanoTime()
        fun elapsed() = (System.nanoTime() - start) / 1_000_000
        val guard = guard(case, options)
        val thrown: String? = try {
            withTimeout(guard) { case.body(comm, ctx) }
            null
        } catch (e: TimeoutCancellationException) {
            "did not finish within the guard timeout of $guard (a hang); failures recorded so far: ${ctx.failures}"
        } catch (e: Throwable) {
            if (e is CancellationException && !currentCoroutineContext().isActive) throw e
            "threw ${e.stackTraceToString()}"
        }
        val failures = ctx.failures + listOfNotNull(thrown)
        return if (failures.isEmpty()) CaseResult(case.name, rank, size, CaseResult.Status.Passed, null, elapsed())
        else CaseResult(case.name, rank, size, CaseResult.Status.Failed,
            "rank $rank of $size (seed ${ctx.seed}):\n" + failures.joinToString("\n") { "  - $it" }, elapsed())
    }
}
