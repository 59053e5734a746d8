package dev.tpcomm.testkit

import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.Communicator
import dev.tpcomm.MonitoredBarrierException
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import kotlinx.coroutines.delay
import kotlin.time.Duration

/**
 * [Communicator.monitoredBarrier] on every backend: repeated barriers between collectives, and a
 * rank that never arrives, which rank 0 must name.
 */
internal object MonitoredBarrierCases {
    /** The barrier's timeout in the failure case: well inside the communicator's own ([ConformanceOptions.failureTimeout]), so its deadline never fires first. */
    private fun barrierTimeout(ctx: CaseContext): Duration = ctx.options.failureTimeout / 4

    private fun ones(ctx: CaseContext): Tensor = ctx.options.placement.toBackend(Tensor.of(floatArrayOf(1f, 1f)))

    /** Between collectives: every rank passes, repeatedly, and the collectives around it are unaffected. */
    val collective: List<ConformanceCase> = listOf(
        ConformanceCase("monitoredBarrier: every rank arrives, between collectives", CaseKind.Collective) { comm, ctx ->
            repeat(5) { i ->
                val r = attempt { comm.monitoredBarrier(ctx.options.timeout, waitAllRanks = i % 2 == 1) }
                ctx.expect(r.error == null) { "monitoredBarrier #$i with every rank arriving threw ${r.error?.describe()}" }
                val sum = ctx.options.placement.toHost(comm.allReduce(ones(ctx), ReduceOp.Sum)).toFloatArray()
                ctx.expect(sum.all { it == comm.worldSize.toFloat() }) { "allReduce after monitoredBarrier #$i gave ${sum.toList()}" }
            }
        },
    )

    /** A rank that never calls: rank 0 names it; every rank ends with a named exception in time; the communicator is aborted. */
    val failure: List<ConformanceCase> = listOf(
        ConformanceCase("failure: monitoredBarrier names a rank that never calls", CaseKind.Failure, 2) { comm, ctx ->
            val victim = comm.worldSize - 1
            val t = barrierTimeout(ctx)
            when (comm.rank) {
                0 -> {
                    val r = attempt { comm.monitoredBarrier(t) }
                    expectFailure(ctx, "monitoredBarrier on rank 0 while rank $victim never calls", r, t, "MonitoredBarrierException naming [$victim]") { e ->
                        e is MonitoredBarrierException && e.missingRanks == listOf(victim) && e.message?.contains("rank $victim did not reach monitoredBarrier") == true
                    }
                    val later = attempt { comm.allReduce(ones(ctx)) }
                    expectFailure(ctx, "a call after a failed monitoredBarrier", later, ctx.options.failureTimeout, "CommunicatorAbortedException") {
                        it is CommunicatorAbortedException
                    }
                }
                victim -> {
                    delay(ctx.options.failureTimeout)
                    val r = attempt { comm.monitoredBarrier(t) }
                    expectFailure(ctx, "the late rank's monitoredBarrier", r, t * 2, "CommunicationException") { it is CommunicationException }
                }
                else -> {
                    // The ranks that arrived learn the list from rank 0 where the backend can tell them (not on
                    // the GPU engine, whose rank 0 aborts first); they end within twice the timeout either way.
                    val r = attempt { comm.monitoredBarrier(t) }
                    expectFailure(ctx, "monitoredBarrier on rank ${comm.rank} while rank $victim never calls", r, t * 2, "MonitoredBarrierException") { e ->
                        e is MonitoredBarrierException && (e.missingRanks == listOf(victim) || e.missingRanks.isEmpty() || e.missingRanks == listOf(0))
                    }
                }
            }
        },
    )
}
