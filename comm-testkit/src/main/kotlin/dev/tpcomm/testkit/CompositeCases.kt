package dev.tpcomm.testkit

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommunicationException
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.allGatherObject
import dev.tpcomm.broadcastObject
import dev.tpcomm.coroutines.FlightRecorded
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.coroutines.startCollective
import dev.tpcomm.gatherObject
import dev.tpcomm.scatterObject
import kotlinx.coroutines.coroutineScope

/**
 * Operations made of several library calls (the object collectives: lengths, then payloads) are
 * one operation to their user: issued atomically in call order (their steps never interleave with
 * the next call's, however the calls are started), recorded and named as the user called them,
 * and a root's bad argument reaches every rank at once.
 */
internal object CompositeCases {
    private fun objects(o: ConformanceOptions): String? = if (!o.objectCollectives) "the backend does not support object collectives" else null

    val collective: List<ConformanceCase> = listOf(
        ConformanceCase(
            "object collectives: started back to back with tensor collectives, issued in call order", CaseKind.Collective, 1,
            { o, _ -> objects(o) },
        ) { comm, ctx ->
            val n = comm.worldSize
            val me = comm.rank
            repeat(24) { round ->
                // Encodings of different lengths per rank and per round, so that a step paired with
                // another call's step would move a wrong number of bytes.
                val tensor = ctx.options.placement.toBackend(Tensor.of(floatArrayOf(me + 1f, round.toFloat())))
                val root = round % n
                coroutineScope {
                    val a = startCollective { comm.allGatherObject("r$me".repeat(1 + (me + round) % 4)) }
                    val b = startCollective { comm.allGatherObject(List(1 + (round + me) % 3) { me.toLong() * 1000 + it }) }
                    val c = startCollective { comm.allReduce(tensor, ReduceOp.Sum) }
                    val d = startCollective { comm.broadcastObject(if (me == root) "from $root in $round" else null, root) }
                    val e = startCollective { comm.gatherObject(me * 7 + round, root) }
                    val f = startCollective { comm.scatterObject(if (me == root) List(n) { "to $it".repeat(1 + it % 3) } else null, root) }
                    val ra = a.await()
                    val rb = b.await()
                    ctx.expect(ra == List(n) { r -> "r$r".repeat(1 + (r + round) % 4) }) { "round $round: the first allGatherObject returned $ra" }
                    ctx.expect(rb == List(n) { r -> List(1 + (round + r) % 3) { r.toLong() * 1000 + it } }) { "round $round: the second allGatherObject returned $rb" }
                    val sum = ctx.options.placement.toHost(c.await()).toFloatArray().toList()
                    ctx.expect(sum == listOf(n * (n + 1) / 2f, n * round.toFloat())) { "round $round: the allReduce between object collectives returned $sum" }
                    val rd = d.await()
                    ctx.expect(rd == "from $root in $round") { "round $round: broadcastObject returned $rd" }
                    val gathered = e.await()
                    if (me == root) ctx.expect(gathered == List(n) { it * 7 + round }) { "round $round: gatherObject returned $gathered on the root" }
                    else ctx.expect(gathered == null) { "round $round: gatherObject returned $gathered on a non-root" }
                    val rf = f.await()
                    ctx.expect(rf == "to $me".repeat(1 + me % 3)) { "round $round: scatterObject returned $rf" }
                }
            }
        },
        ConformanceCase(
            "object collectives: recorded once, under the name the user called, with a sequence number of their own", CaseKind.Collective, 1,
            { o, _ -> objects(o) },
        ) { comm, ctx ->
            val recorder = (comm as? FlightRecorded)?.flightRecorder ?: return@ConformanceCase
            val before = recorder.nextSequenceNumber
            comm.allGatherObject(listOf("x".repeat(comm.rank + 1)))
            comm.broadcastObject(if (comm.rank == 0) 42 else null, 0)
            val ones = ctx.options.placement.toBackend(Tensor.of(floatArrayOf(1f)))
            comm.allReduce(ones)
            val records = recorder.snapshot().filter { it.sequence >= before }
            val names = records.map { it.operation }
            ctx.expect(names == listOf("allGatherObject", "broadcastObject", "allReduce")) {
                "the flight recorder kept ${records.map { "${it.operation}#${it.sequence}(${it.dtype}${it.shape})" }} for allGatherObject, broadcastObject, allReduce; " +
                    "expected one record per call, named as called"
            }
            ctx.expect(records.map { it.sequence } == List(records.size) { before + it }) { "sequence numbers ${records.map { it.sequence }}, expected consecutive from $before" }
            ctx.expect(records.all { it.state == FlightRecorder.State.Completed }) { "states ${records.map { it.state }}, expected all Completed" }
        },
        ConformanceCase(
            "object collectives: broadcastObject(null) on the root fails every rank at once and leaves the communicator usable", CaseKind.Collective, 2,
            { o, _ -> objects(o) },
        ) { comm, ctx ->
            val root = comm.worldSize - 1
            val r = attempt { comm.broadcastObject<String>(null, root) }
            val e = r.error
            val quick = ctx.options.failureTimeout.inWholeMilliseconds / 2
            if (comm.rank == root) {
                ctx.expect(e is IllegalArgumentException && e.message!!.contains("must pass a value")) {
                    "broadcastObject(null) on the root: expected IllegalArgumentException, got ${e?.describe() ?: "a value"}"
                }
            } else {
                ctx.expect(e is CommunicationException && e.operation == "broadcastObject" && e.sequenceNumber >= 1 && e.message!!.contains("rank $root")) {
                    "broadcastObject on rank ${comm.rank} while the root passed null: expected a CommunicationException of broadcastObject naming rank $root, got ${e?.describe() ?: "a value"}"
                }
            }
            ctx.expect(r.elapsedMillis < quick) { "broadcastObject with a null root value took ${r.elapsedMillis} ms on rank ${comm.rank}; expected at once (under $quick ms)" }
            val ones = ctx.options.placement.toBackend(Tensor.of(floatArrayOf(1f)))
            val sum = ctx.options.placement.toHost(comm.allReduce(ones)).toFloatArray()[0]
            ctx.expect(sum == comm.worldSize.toFloat()) { "allReduce after the refused broadcastObject returned $sum" }
        },
    )

    val failure: List<ConformanceCase> = listOf(
        ConformanceCase(
            "failure: an object collective against a tensor collective is a mismatch naming the object collective", CaseKind.Failure, 2,
            { o, _ -> objects(o) ?: if (!o.checksConsistency) "the backend does not check consistency" else null },
        ) { comm, ctx ->
            // allGatherObject's first step all-gathers one Int64 per rank: a peer's allGather of one Int64 must not pass for it.
            val r = attempt {
                if (comm.rank == 0) comm.allGatherObject("value") else comm.allGather(ctx.options.placement.toBackend(Tensor.zeros(DType.Int64, 1)))
            }
            expectFailure(ctx, "allGatherObject against allGather(Int64[1]) on rank ${comm.rank}", r, ctx.options.failureTimeout, "CollectiveMismatchException naming allGatherObject") { e ->
                e is CollectiveMismatchException && "operation" in e.fields && e.message!!.contains("allGatherObject")
            }
            val e = r.error as? CommunicationException
            if (comm.rank == 0 && e != null) {
                ctx.expect(e.operation == "allGatherObject") { "rank 0's exception names operation '${e.operation}', expected allGatherObject" }
            }
        },
    )
}
