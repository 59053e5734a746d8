package dev.tpcomm.testkit

import dev.tpcomm.CommunicationException
import dev.tpcomm.DType
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.Communicator
import dev.tpcomm.MonitoredBarrierException
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import kotlin.time.Duration

/**
 * [Communicator.monitoredBarrier] on every backend: repeated barriers between collectives, and a
 * rank that never arrives, which rank 0 must name.
 */
internal object MonitoredBarrierCases {
    /** The barrier's timeout in the failure case: well inside the communicator's own ([ConformanceOptions.failureTimeout]), so its deadline never fires first. */
    private fun barrierTimeout(ctx: CaseContext): Duration = ctx.options.failureTimeout / 4

    /**
     * The barrier's timeout where every rank arrives: under half the communicator's, as
     * monitoredBarrier requires, also where a runner gives its communicators less than
     * [ConformanceOptions.timeout] (the MPI jobs: 30 s against 60 s).
     */
    private fun passingTimeout(ctx: CaseContext): Duration = ctx.options.timeout / 8

    private fun ones(ctx: CaseContext): Tensor = ctx.options.placement.toBackend(Tensor.of(floatArrayOf(1f, 1f)))

    /** Between collectives: every rank passes, repeatedly, and the collectives around it are unaffected. */
    val collective: List<ConformanceCase> = listOf(
        ConformanceCase("monitoredBarrier: every rank arrives, between collectives", CaseKind.Collective) { comm, ctx ->
            repeat(5) { i ->
                val r = attempt { comm.monitoredBarrier(passingTimeout(ctx), waitAllRanks = i % 2 == 1) }
                ctx.expect(r.error == null) { "monitoredBarrier #$i with every rank arriving threw ${r.error?.describe()}" }
                val sum = ctx.options.placement.toHost(comm.allReduce(ones(ctx), ReduceOp.Sum)).toFloatArray()
                ctx.expect(sum.all { it == comm.worldSize.toFloat() }) { "allReduce after monitoredBarrier #$i gave ${sum.toList()}" }
            }
        },
        ConformanceCase(
            "monitoredBarrier: a wildcard receive posted meanwhile never takes its messages", CaseKind.Collective, 2,
            { o, _ -> if (!o.taggedPointToPoint || o.placement !== TensorPlacement.Host) "the backend has no ANY_SOURCE/ANY_TAG receives of host tensors" else null },
        ) { comm, ctx ->
            val n = comm.worldSize
            val next = (comm.rank + 1) % n
            val prev = (comm.rank + n - 1) % n
            repeat(5) { i ->
                coroutineScope {
                    // A user receive as large as the barrier's messages (8 bytes), from any rank with any tag, posted first.
                    val got = Tensor.zeros(DType.Int64, 1)
                    val user = async(start = CoroutineStart.UNDISPATCHED) { comm.recv(got, Communicator.ANY_SOURCE, Communicator.ANY_TAG) }
                    val r = attempt { comm.monitoredBarrier(passingTimeout(ctx)) }
                    ctx.expect(r.error == null) { "monitoredBarrier #$i with a wildcard receive posted threw ${r.error?.describe()}" }
                    comm.send(Tensor.of(longArrayOf(i * 1000L + comm.rank)), next, 0)
                    val info = user.await()
                    ctx.expect(info.source == prev && info.tag == 0 && got.getLong(0) == i * 1000L + prev) {
                        "the wildcard receive of round $i got ${got.getLong(0)} from rank ${info.source} with tag ${info.tag}; " +
                            "expected ${i * 1000L + prev} from rank $prev with tag 0 (it must never take the barrier's messages)"
                    }
                }
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
