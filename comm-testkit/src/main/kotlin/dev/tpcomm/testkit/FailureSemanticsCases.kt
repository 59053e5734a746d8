package dev.tpcomm.testkit

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.Communicator
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import kotlinx.coroutines.delay
import kotlin.time.Duration

/**
 * The failure semantics every backend must share, so that a program tested in-process fails the
 * same way under `mpirun` and on GPUs:
 *
 * - **A communicator fails alone.** A mismatch or a timeout on a communicator made by `split`
 *   fails that communicator on every one of its ranks, and nothing else: its parent, a sibling
 *   split from the same parent, and communicators split from the failed one's parent earlier stay
 *   usable; a failure of the parent leaves the communicators split from it usable. This is MPI's
 *   model (communicators are independent; with `MPI_ERRORS_RETURN` an error on one does not touch
 *   `MPI_COMM_WORLD`) and NCCL's (`ncclCommAbort` of one communicator aborts it alone; a parent's
 *   abort reaches a child only while `ncclCommSplit` is still building it).
 * - **A receive buffer of the wrong size is a [CommunicationException]** (not an
 *   [IllegalArgumentException]: no rank can see the mistake from its own arguments, only from the
 *   message that arrived), raised on the receiver. Where messages are matched by tag (MPI, local)
 *   it says both sizes and what to change, nothing is received, the message stays queued for a
 *   receive of the right size, and the communicator stays usable. NCCL has no way to report it
 *   (`ncclSend`/`ncclRecv` must agree on the count; a disagreement is undefined), so there the case
 *   asks only for a named [CommunicationException] (or the completion of the call) on both sides
 *   within the deadline.
 *
 * Every case is a [CaseKind.Failure] case: it breaks (a communicator split from) the one it is
 * given, which runners create fresh with the short failure timeout.
 */
internal object FailureSemanticsCases {
    private fun timeout(ctx: CaseContext): Duration = ctx.options.failureTimeout

    private fun needsGroups(consistency: Boolean): (ConformanceOptions, Int) -> String? = { o, _ ->
        when {
            !o.groups -> "the backend has no split"
            consistency && !o.checksConsistency -> "the backend does not check consistency"
            else -> null
        }
    }

    /** `[rank + 1]` summed over [comm]: must be `n (n + 1) / 2`; records a wrong or failed result as [what]. */
    private suspend fun expectUsable(ctx: CaseContext, comm: Communicator, what: String) {
        val p = ctx.options.placement
        val t = p.toBackend(Tensor.of(floatArrayOf(comm.rank + 1f)))
        val r = attempt { comm.allReduce(t) }
        if (r.error != null) {
            ctx.fail("$what must stay usable, but its allReduce failed with ${r.error.describe()}")
            return
        }
        val n = comm.worldSize
        val got = p.toHost(t).toFloatArray()[0]
        ctx.expect(got == n * (n + 1) / 2f) { "$what: allReduce of rank + 1 over $n ranks gave $got, expected ${n * (n + 1) / 2f}" }
    }

    /** A collective on a communicator that failed must be refused with [CommunicatorAbortedException]. */
    private suspend fun expectBroken(ctx: CaseContext, comm: Communicator, what: String) {
        val r = attempt { comm.allReduce(ctx.options.placement.toBackend(Tensor.of(floatArrayOf(1f)))) }
        expectFailure(ctx, "a call on $what after its failure", r, timeout(ctx), "CommunicatorAbortedException") { it is CommunicatorAbortedException }
    }

    /** Rank 0 asks for Max, the others for Sum: a [CollectiveMismatchException] on every rank of [comm]. */
    private suspend fun mismatch(ctx: CaseContext, comm: Communicator, what: String) {
        val t = ctx.options.placement.toBackend(Tensor.of(floatArrayOf(1f, 2f)))
        val r = attempt { comm.allReduce(t, if (comm.rank == 0) ReduceOp.Max else ReduceOp.Sum) }
        expectFailure(ctx, "mismatched allReduce on $what, rank ${comm.rank}", r, timeout(ctx), "CollectiveMismatchException naming field 'op'") { e ->
            e is CollectiveMismatchException && "op" in e.fields
        }
    }

    private val timeoutLike: (Throwable) -> Boolean = { e ->
        e is CommunicationTimeoutException || (e is CommunicatorAbortedException && e.chain().any { it is CommunicationTimeoutException })
    }

    val all: List<ConformanceCase> = listOf(
        ConformanceCase(
            "failure semantics: a mismatch on a split communicator fails it alone; the parent and a sibling stay usable",
            CaseKind.Failure, 2, needsGroups(consistency = true),
        ) { comm, ctx ->
            val victim = comm.split(0, comm.rank) ?: error("split(0) returned null on rank ${comm.rank}")
            val sibling = comm.split(0, comm.rank) ?: error("split(0) returned null on rank ${comm.rank}")
            mismatch(ctx, victim, "the split communicator")
            expectBroken(ctx, victim, "the split communicator")
            expectUsable(ctx, comm, "the parent of the communicator that failed")
            expectUsable(ctx, sibling, "a sibling of the communicator that failed")
            victim.close()
            sibling.close()
            expectUsable(ctx, comm, "the parent, after its children were closed,")
        },
        ConformanceCase(
            "failure semantics: a timeout on a split communicator fails it alone; the parent stays usable",
            CaseKind.Failure, 2, needsGroups(consistency = false),
        ) { comm, ctx ->
            val victim = comm.split(0, comm.rank) ?: error("split(0) returned null on rank ${comm.rank}")
            val late = comm.worldSize - 1
            if (comm.rank != late) {
                val r = attempt { victim.allReduce(ctx.options.placement.toBackend(Tensor.of(floatArrayOf(1f)))) }
                expectFailure(ctx, "allReduce on the split communicator while rank $late never calls it", r, timeout(ctx), "CommunicationTimeoutException", timeoutLike)
                expectBroken(ctx, victim, "the split communicator that timed out")
            } else {
                // Never calls on the split communicator. Its call on the parent must fall between the
                // others' arrival there (their deadline on the split one, T, plus the time their abort
                // takes, d) and the end of either side's deadline on the parent: X + T > T + d and
                // T + d + T > X. X = T leaves a whole timeout of margin on both sides (2T did not: the
                // GPU engine's abort on a loaded 2-core machine took d > 0, and the parent timed out).
                delay(timeout(ctx))
            }
            expectUsable(ctx, comm, "the parent of the communicator that timed out")
            victim.close()
        },
        ConformanceCase(
            "failure semantics: a failure of the parent leaves the communicators split from it usable",
            CaseKind.Failure, 2, needsGroups(consistency = true),
        ) { comm, ctx ->
            val child = comm.split(0, comm.rank) ?: error("split(0) returned null on rank ${comm.rank}")
            mismatch(ctx, comm, "the parent")
            expectBroken(ctx, comm, "the parent")
            expectUsable(ctx, child, "a communicator split from the parent before the parent failed")
            child.close()
        },
        ConformanceCase(
            "failure semantics: abort on one rank refuses its later calls naming the reason, and ends the peers' call with a named CommunicationException",
            CaseKind.Failure, 2, { _, _ -> null },
        ) { comm, ctx ->
            val p = ctx.options.placement
            if (comm.rank == 0) {
                // The peers are (most likely) waiting in their allReduce, which this rank never joins.
                delay(timeout(ctx) / 5)
                ctx.expect(comm.abort("the test's own watchdog gave up")) { "abort() on a usable communicator must return true" }
                ctx.expect(!comm.abort("a second abort")) { "a second abort() must return false: the first failure stays" }
                ctx.expect(comm.isAborted) { "isAborted must be true after abort()" }
                val r = attempt { comm.allReduce(p.toBackend(Tensor.of(floatArrayOf(1f)))) }
                expectFailure(ctx, "allReduce after abort() on this rank", r, timeout(ctx), "CommunicatorAbortedException naming the reason") { e ->
                    e is CommunicatorAbortedException && "the test's own watchdog gave up" in e.message.orEmpty()
                }
            } else {
                val r = attempt { comm.allReduce(p.toBackend(Tensor.of(floatArrayOf(1f)))) }
                expectFailure(ctx, "allReduce on rank ${comm.rank} while rank 0 aborts the communicator", r, timeout(ctx), "a CommunicationException") { e ->
                    e is CommunicationException
                }
                ctx.expect(comm.isAborted) { "isAborted must be true on rank ${comm.rank} after its call failed" }
                expectBroken(ctx, comm, "the communicator rank 0 aborted")
            }
        },
        ConformanceCase(
            "failure semantics: a receive buffer of the wrong size is a CommunicationException saying both sizes",
            CaseKind.Failure, 2, { o, _ -> if (!o.pointToPoint) "the backend has no point-to-point" else null },
        ) { comm, ctx ->
            val p = ctx.options.placement
            val tagged = ctx.options.taggedPointToPoint
            val tag = if (tagged) 3 else 0
            val sent = floatArrayOf(1f, 2f, 3f, 4f) // 16 bytes: below every backend's eager limit
            when (comm.rank) {
                0 -> {
                    val r = attempt { comm.send(p.toBackend(Tensor.of(sent)), 1, tag) }
                    ctx.expect(r.error == null || r.error is CommunicationException) {
                        "the send of 16 bytes to a receiver with a smaller buffer: expected it to complete or a CommunicationException, got ${r.error?.describe()}"
                    }
                }
                1 -> {
                    val small = p.toBackend(Tensor.of(floatArrayOf(0f, 0f)))
                    val r = attempt { comm.recv(small, 0, tag) }
                    if (tagged) {
                        expectFailure(ctx, "recv of a 16-byte message into an 8-byte tensor", r, timeout(ctx), "a CommunicationException (not IllegalArgumentException)") { e ->
                            // Tagged backends refuse it at once, without breaking the communicator.
                            e is CommunicationException && e !is CommunicationTimeoutException && e !is CommunicatorAbortedException
                        }
                    } else {
                        // NCCL/RCCL cannot tell: ncclSend and ncclRecv must agree on the count, and a
                        // disagreement is undefined. The simulator reports it on either side, as it
                        // finds it (the receive returned normally once in a run of 3 ranks): what the case
                        // asks here is that nothing hangs and nothing fails but with a named exception.
                        ctx.expect(r.error == null || r.error is CommunicationException) {
                            "recv of a 16-byte message into an 8-byte tensor: expected it to complete or a CommunicationException, got ${r.error?.describe()}"
                        }
                    }
                    if (tagged) {
                        val reason = (r.error as? CommunicationException)?.reason.orEmpty()
                        ctx.expect("16 bytes" in reason && "8 bytes" in reason) {
                            "recv into a tensor too small: the message must say the size sent (16 bytes) and the buffer's (8 bytes), got \"$reason\""
                        }
                        ctx.expect(p.toHost(small).toFloatArray().toList() == listOf(0f, 0f)) { "the refused recv wrote its buffer: ${p.toHost(small).toFloatArray().toList()}" }
                        val large = p.toBackend(Tensor.of(FloatArray(8)))
                        val big = attempt { comm.recv(large, 0, tag) }
                        expectFailure(ctx, "recv of a 16-byte message into a 32-byte tensor", big, timeout(ctx), "a CommunicationException (not IllegalArgumentException)") { e ->
                            e is CommunicationException && e !is CommunicationTimeoutException && e !is CommunicatorAbortedException
                        }
                        val right = p.toBackend(Tensor.of(FloatArray(4)))
                        val ok = attempt { comm.recv(right, 0, tag) }
                        ctx.expect(ok.error == null) { "the message must stay queued after the refused receives, but the receive of the right size failed: ${ok.error?.describe()}" }
                        if (ok.error == null) {
                            val got = p.toHost(right).toFloatArray().toList()
                            ctx.expect(got == sent.toList()) { "the receive of the right size after the refused ones got $got, expected ${sent.toList()}" }
                        }
                    }
                }
            }
            if (tagged) expectUsable(ctx, comm, "the communicator after a refused receive")
        },
    )
}
