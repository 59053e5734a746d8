package dev.tpcomm.testkit

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.withTimeout
import kotlin.time.Duration

/**
 * Failure modes needing cooperating ranks. Each runs on a communicator created with
 * `timeout = options.failureTimeout` (the runner provides a fresh one) and aborts it on purpose;
 * every rank must end with the named exception within twice the timeout.
 */
internal object FailureCases {
    private fun failure(name: String, minWorldSize: Int, skip: (ConformanceOptions, Int) -> String? = { _, _ -> null }, body: suspend (Communicator, CaseContext) -> Unit) =
        ConformanceCase(name, CaseKind.Failure, minWorldSize, skip, body)

    private val timeoutLike: (Throwable) -> Boolean = { e ->
        e is CommunicationTimeoutException || (e is CommunicatorAbortedException && e.chain().any { it is CommunicationTimeoutException })
    }

    private fun timeout(ctx: CaseContext): Duration = ctx.options.failureTimeout

    private fun floats(ctx: CaseContext, vararg values: Float): Tensor = ctx.options.placement.toBackend(Tensor.of(values))

    /** Every later call on an aborted communicator must fail with [CommunicatorAbortedException]. */
    private suspend fun laterCallFails(comm: Communicator, ctx: CaseContext, after: String) {
        val later = attempt { comm.allReduce(floats(ctx, 1f)) }
        expectFailure(ctx, "a call after $after", later, timeout(ctx), "CommunicatorAbortedException") { it is CommunicatorAbortedException }
    }

    /**
     * The failure of the call that failed first must say where it happened (this rank, the
     * backend, the operation, its sequence number) and carry the flight recorder's dump.
     */
    private fun diagnostics(ctx: CaseContext, what: String, comm: Communicator, error: Throwable?) {
        val e = error as? CommunicationException ?: return
        ctx.expect(e.backend == comm.backendName && e.rank == comm.rank && e.sequenceNumber >= 1 && e.operation.isNotBlank()) {
            "$what: the exception must name this rank, the backend, the operation and its sequence number, got rank ${e.rank}, backend '${e.backend}', operation '${e.operation}', #${e.sequenceNumber}"
        }
        ctx.expect(e.chain().any { it is CommunicationException && !it.flightRecorderDump.isNullOrBlank() }) {
            "$what: the exception (or its cause) must carry the flight recorder's dump"
        }
    }

    private fun mismatch(name: String, field: String, minWorldSize: Int = 2, call: suspend (Communicator, CaseContext, Boolean) -> Unit) =
        failure("failure: mismatched $name", minWorldSize, { o, _ -> if (!o.checksConsistency) "the backend does not check consistency" else null }) { comm, ctx ->
            val r = attempt { call(comm, ctx, comm.rank == 0) }
            expectFailure(ctx, "mismatched $name on rank ${comm.rank}", r, timeout(ctx), "CollectiveMismatchException naming field '$field'") { e ->
                e is CollectiveMismatchException && field in e.fields && e.ranks.isNotEmpty()
            }
            diagnostics(ctx, "mismatched $name", comm, r.error)
            laterCallFails(comm, ctx, "a mismatch")
        }

    val all: List<ConformanceCase> = listOf(
        failure("failure: a rank that never calls", 2) { comm, ctx ->
            val victim = comm.worldSize - 1
            val t = floats(ctx, 1f, 2f, 3f)
            if (comm.rank != victim) {
                val r = attempt { comm.allReduce(t) }
                expectFailure(ctx, "allReduce on rank ${comm.rank} while rank $victim never calls", r, timeout(ctx), "CommunicationTimeoutException", timeoutLike)
                diagnostics(ctx, "allReduce on rank ${comm.rank} while rank $victim never calls", comm, r.error)
                laterCallFails(comm, ctx, "a timeout")
            } else {
                // Stay away past the others' deadline, then find the communicator aborted.
                delay(timeout(ctx) * 2)
                val r = attempt { comm.barrier() }
                expectFailure(ctx, "the late rank's first call after the others timed out", r, timeout(ctx), "CommunicationException") { it is CommunicationException }
            }
        },
        mismatch("op", "op") { comm, ctx, odd -> comm.allReduce(floats(ctx, 1f, 2f), if (odd) ReduceOp.Max else ReduceOp.Sum) },
        mismatch("op PreMulSum", "op") { comm, ctx, odd -> comm.allReduce(floats(ctx, 1f, 2f), if (odd) ReduceOp.PreMulSum(0.5) else ReduceOp.Sum) },
        mismatch("dtype", "dtype") { comm, ctx, odd ->
            comm.allReduce(ctx.options.placement.toBackend(Tensor.zeros(if (odd) DType.Int32 else DType.Float32, 4)))
        },
        mismatch("shape", "shape") { comm, ctx, odd -> comm.allReduce(ctx.options.placement.toBackend(Tensor.zeros(DType.Float32, if (odd) 5 else 4))) },
        mismatch("root", "root") { comm, ctx, odd -> comm.broadcast(floats(ctx, 1f, 2f), if (odd) 1 else 0) },
        mismatch("order", "operation") { comm, ctx, odd ->
            // Rank 0 issues (broadcast, allReduce); the others (allReduce, broadcast).
            val t = floats(ctx, 1f, 2f)
            if (odd) { comm.broadcast(t, 0); comm.allReduce(t) } else { comm.allReduce(t); comm.broadcast(t, 0) }
        },
        mismatch("allGatherV sizes", "sizes") { comm, ctx, odd ->
            // Rank 0 believes rank 1 contributes 2 rows; rank 1 (and everyone else) says 1.
            val n = comm.worldSize
            val sizes = List(n) { if (odd && it == 1) 2 else 1 }
            comm.allGatherV(ctx.options.placement.toBackend(Tensor.zeros(DType.Float32, 1, 2)), sizes)
        },
        mismatch("reduceScatterV sizes", "sizes") { comm, ctx, odd ->
            // The same total rows everywhere; rank 0 splits them differently.
            val n = comm.worldSize
            val sizes = List(n) { if (odd) (if (it == 0) 2 else if (it == 1) 0 else 1) else 1 }
            comm.reduceScatterV(ctx.options.placement.toBackend(Tensor.zeros(DType.Float32, n, 2)), sizes)
        },
        mismatch("allToAllV splits", "sizes") { comm, ctx, odd ->
            // Every rank sends one row to each; rank 0 expects two from rank 1.
            val n = comm.worldSize
            val outputSplits = List(n) { if (odd && it == 1) 2 else 1 }
            comm.allToAllV(ctx.options.placement.toBackend(Tensor.zeros(DType.Float32, n, 2)), List(n) { 1 }, outputSplits)
        },
        failure("failure: cancelling one rank's in-flight call", 2) { comm, ctx ->
            val t = floats(ctx, 1f, 2f, 3f)
            if (comm.rank == 0) {
                var completed = false
                coroutineScope {
                    val job = launch(start = CoroutineStart.UNDISPATCHED) { comm.allReduce(t); completed = true }
                    delay(timeout(ctx) / 4)
                    val r = attempt { job.cancel(); job.join() }
                    ctx.expect(!completed) { "the cancelled allReduce completed normally; the others had not called it yet" }
                    ctx.expect(job.isCancelled) { "cancelling the in-flight allReduce did not cancel it" }
                    ctx.expect(r.elapsedMillis <= 2 * timeout(ctx).inWholeMilliseconds) { "cancelling the in-flight allReduce took ${r.elapsedMillis} ms" }
                }
                laterCallFails(comm, ctx, "the cancellation of an in-flight call")
            } else {
                delay(timeout(ctx) / 2)
                val r = attempt { comm.allReduce(t) }
                expectFailure(ctx, "allReduce on rank ${comm.rank} after rank 0 cancelled its call", r, timeout(ctx), "CommunicationException") { it is CommunicationException }
            }
        },
        failure("failure: a caller's withTimeout around an in-flight call", 2) { comm, ctx ->
            val t = floats(ctx, 1f, 2f, 3f)
            if (comm.rank == 0) {
                // The caller's own deadline passes while the others have not called yet: a named
                // timeout for this call (docs/failures.md), not a bare
                // TimeoutCancellationException, and the communicator aborted.
                val r = attempt { withTimeout(timeout(ctx) / 4) { comm.allReduce(t) } }
                expectFailure(ctx, "allReduce on rank 0 inside withTimeout(${timeout(ctx) / 4}) before the others called", r, timeout(ctx), "CommunicationTimeoutException") { e ->
                    e is CommunicationTimeoutException && e.operation == "allReduce"
                }
                diagnostics(ctx, "allReduce on rank 0 inside withTimeout", comm, r.error)
                laterCallFails(comm, ctx, "the caller's deadline")
            } else {
                delay(timeout(ctx) / 2)
                // Rank 0's call may still be inside a blocking MPI call that completes this one
                // (docs/mpi.md); otherwise it ends with a CommunicationException.
                val r = attempt { comm.allReduce(t) }
                ctx.expect(r.error == null || r.error is CommunicationException) {
                    "allReduce on rank ${comm.rank} after rank 0's caller gave up: expected it to complete or a CommunicationException, got ${r.error?.describe()}"
                }
                ctx.expect(r.elapsedMillis <= 2 * timeout(ctx).inWholeMilliseconds) { "allReduce on rank ${comm.rank} after rank 0's caller gave up took ${r.elapsedMillis} ms" }
            }
        },
        failure("failure: use after close", 1) { comm, ctx ->
            comm.barrier()
            comm.close()
            val t = floats(ctx, 4f, 5f)
            val r = attempt { comm.allReduce(t) }
            expectFailure(ctx, "allReduce after close", r, timeout(ctx), "CommunicatorAbortedException") { it is CommunicatorAbortedException }
            ctx.expect(ctx.options.placement.toHost(t).toFloatArray().toList() == listOf(4f, 5f)) { "the refused allReduce after close changed its buffer" }
            val again = attempt { comm.close() }
            ctx.expect(again.error == null) { "a second close must do nothing, it threw ${again.error?.describe()}" }
            val b = attempt { comm.barrier() }
            expectFailure(ctx, "barrier after close", b, timeout(ctx), "CommunicatorAbortedException") { it is CommunicatorAbortedException }
        },
        failure("failure: one rank closes while the others call", 2) { comm, ctx ->
            if (comm.rank == 0) {
                comm.close()
                laterCallFails(comm, ctx, "close")
            } else {
                val r = attempt { comm.allReduce(floats(ctx, 1f)) }
                expectFailure(ctx, "allReduce on rank ${comm.rank} after rank 0 closed", r, timeout(ctx), "CommunicationException") { it is CommunicationException }
            }
        },
    )
}
