package dev.tpcomm.testkit

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.PointToPoint
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor

/**
 * Bad arguments detectable on one rank: every rank makes the same bad call, which must throw
 * [IllegalArgumentException] with a message, leave the buffers unchanged, and leave the
 * communicator usable (checked with a correct collective afterwards).
 */
internal object ArgumentCases {
    suspend fun refused(comm: Communicator, ctx: CaseContext, what: String, tensors: List<Tensor?>, block: suspend () -> Unit) {
        val p = ctx.options.placement
        val before = tensors.map { it?.let { t -> TestData.snapshot(p, t) } }
        val r = attempt(block)
        val e = r.error
        when {
            e == null -> ctx.fail("$what: expected IllegalArgumentException, the call succeeded")
            e !is IllegalArgumentException -> ctx.fail("$what: expected IllegalArgumentException, got ${e.describe()}")
            e.message.isNullOrBlank() -> ctx.fail("$what: the IllegalArgumentException has no message saying what to change")
        }
        tensors.forEachIndexed { i, t ->
            if (t != null) TestData.exactMismatch(before[i]!!, p.toHost(t))?.let { ctx.fail("$what: argument $i changed although the call was refused: $it") }
        }
    }

    suspend fun stillUsable(comm: Communicator, ctx: CaseContext, after: String) {
        val t = ctx.options.placement.toBackend(Tensor.of(intArrayOf(1, comm.rank)))
        val r = attempt { comm.allReduce(t) }
        if (r.error != null) { ctx.fail("after $after the communicator must stay usable, but allReduce threw ${r.error.describe()}"); return }
        val got = ctx.options.placement.toHost(t).toIntArray().toList()
        val expected = listOf(comm.worldSize, (0 until comm.worldSize).sum())
        ctx.expect(got == expected) { "after $after, allReduce gave $got, expected $expected" }
    }

    private fun input(ctx: CaseContext, dtype: DType, vararg shape: Int) =
        ctx.options.placement.toBackend(TestData.input(ctx.seed, 200, 0, dtype, shape.toList()))

    private fun anyDtype(ctx: CaseContext) = if (DType.Float32 in ctx.options.dtypes) DType.Float32 else ctx.options.dtypes.minBy { it.ordinal }

    val all: List<ConformanceCase> = listOf(
        ConformanceCase("arguments: root out of range is refused", CaseKind.Collective) { comm, ctx ->
            val n = comm.worldSize
            val dt = anyDtype(ctx)
            for (root in listOf(n, -1, n + 5)) {
                val t = input(ctx, dt, 2 * n)
                refused(comm, ctx, "broadcast(root = $root)", listOf(t)) { comm.broadcast(t, root) }
                refused(comm, ctx, "reduce(root = $root)", listOf(t)) { comm.reduce(t, root) }
                refused(comm, ctx, "gather(root = $root)", listOf(t)) { comm.gather(t, root) }
                val out = input(ctx, dt, 2)
                refused(comm, ctx, "scatter(root = $root)", listOf(out, t)) { comm.scatter(out, t, root) }
            }
            stillUsable(comm, ctx, "refused roots")
        },
        ConformanceCase("arguments: dim out of range is refused", CaseKind.Collective) { comm, ctx ->
            val n = comm.worldSize
            val dt = anyDtype(ctx)
            for (dim in listOf(2, -3, 7)) {
                val t = input(ctx, dt, n, 2 * n)
                refused(comm, ctx, "allGather(dim = $dim) of a 2-d tensor", listOf(t)) { comm.allGather(t, dim) }
                refused(comm, ctx, "reduceScatter(dim = $dim) of a 2-d tensor", listOf(t)) { comm.reduceScatter(t, ReduceOp.Sum, dim) }
                refused(comm, ctx, "allToAll(dim = $dim) of a 2-d tensor", listOf(t)) { comm.allToAll(t, dim) }
                refused(comm, ctx, "gather(dim = $dim) of a 2-d tensor", listOf(t)) { comm.gather(t, 0, dim) }
                val out = input(ctx, dt, 1, 2)
                refused(comm, ctx, "scatter(dim = $dim) of a 2-d tensor", listOf(out, t)) { comm.scatter(out, t, 0, dim) }
            }
            stillUsable(comm, ctx, "refused dims")
        },
        ConformanceCase("arguments: a size not divisible by the world size is refused", CaseKind.Collective, minWorldSize = 2) { comm, ctx ->
            val n = comm.worldSize
            val dt = anyDtype(ctx)
            val t = input(ctx, dt, 3, 2 * n + 1)
            refused(comm, ctx, "reduceScatter of size ${2 * n + 1} along dim 1", listOf(t)) { comm.reduceScatter(t, ReduceOp.Sum, 1) }
            refused(comm, ctx, "allToAll of size ${2 * n + 1} along dim 1", listOf(t)) { comm.allToAll(t, 1) }
            // scatter's input is read on the root only, so only the root could refuse an indivisible
            // input: not a bad argument every rank can detect, hence not checked here.
            stillUsable(comm, ctx, "refused indivisible sizes")
        },
        ConformanceCase("arguments: a bitwise op on floats is refused", CaseKind.Collective,
            skipReason = { o, _ -> if (o.dtypes.none { it.isFloatingPoint }) "the backend has no floating-point dtypes" else null }) { comm, ctx ->
            val n = comm.worldSize
            for (dtype in ctx.options.dtypes.filter { it.isFloatingPoint }.sortedBy { it.ordinal }) {
                for (op in listOf(ReduceOp.BitwiseAnd, ReduceOp.BitwiseOr, ReduceOp.BitwiseXor)) {
                    val t = input(ctx, dtype, 2 * n)
                    refused(comm, ctx, "allReduce($dtype, $op)", listOf(t)) { comm.allReduce(t, op) }
                    refused(comm, ctx, "reduce($dtype, $op)", listOf(t)) { comm.reduce(t, 0, op) }
                    refused(comm, ctx, "reduceScatter($dtype, $op)", listOf(t)) { comm.reduceScatter(t, op) }
                }
            }
            stillUsable(comm, ctx, "refused bitwise ops on floats")
        },
        ConformanceCase("arguments: PreMulSum on integers is refused", CaseKind.Collective,
            skipReason = { o, _ -> if (o.dtypes.none { it.isInteger }) "the backend has no integer dtypes" else null }) { comm, ctx ->
            val n = comm.worldSize
            val op = ReduceOp.PreMulSum(1.0 / n)
            for (dtype in ctx.options.dtypes.filter { !op.supports(it) }.sortedBy { it.ordinal }) {
                val t = input(ctx, dtype, 2 * n)
                refused(comm, ctx, "allReduce($dtype, $op)", listOf(t)) { comm.allReduce(t, op) }
                refused(comm, ctx, "reduce($dtype, $op)", listOf(t)) { comm.reduce(t, 0, op) }
                refused(comm, ctx, "reduceScatter($dtype, $op)", listOf(t)) { comm.reduceScatter(t, op) }
                refused(comm, ctx, "reduceScatterV($dtype, $op)", listOf(t)) { comm.reduceScatterV(t, List(n) { 2 }, op) }
            }
            stillUsable(comm, ctx, "refused PreMulSum on integers")
        },
        ConformanceCase("arguments: ops the backend does not perform are refused", CaseKind.Collective,
            skipReason = { o, _ -> if (o.ops.containsAll(ReduceOp.entries)) "the backend performs every op" else null }) { comm, ctx ->
            val n = comm.worldSize
            for (op in ReduceOp.entries.filter { it !in ctx.options.ops }) {
                for (dtype in ctx.options.dtypes.filter { op.supports(it) }.sortedBy { it.ordinal }) {
                    val t = input(ctx, dtype, 2 * n)
                    refused(comm, ctx, "allReduce($dtype, $op) on a backend without $op", listOf(t)) { comm.allReduce(t, op) }
                    refused(comm, ctx, "reduce($dtype, $op) on a backend without $op", listOf(t)) { comm.reduce(t, 0, op) }
                    refused(comm, ctx, "reduceScatter($dtype, $op) on a backend without $op", listOf(t)) { comm.reduceScatter(t, op) }
                }
            }
            stillUsable(comm, ctx, "refused unsupported ops")
        },
        ConformanceCase("arguments: reductions of dtypes the backend does not reduce are refused, naming the dtype", CaseKind.Collective,
            skipReason = { o, _ -> if (o.reducedDtypes.containsAll(o.dtypes)) "the backend reduces every dtype it moves" else null }) { comm, ctx ->
            val n = comm.worldSize
            for (dtype in ctx.options.dtypes.filter { it !in ctx.options.reducedDtypes }.sortedBy { it.ordinal }) {
                for (op in ReduceOp.entries.filter { it in ctx.options.ops && it.supports(dtype) }) {
                    val t = input(ctx, dtype, 2 * n)
                    suspend fun check(what: String, block: suspend () -> Unit) {
                        refused(comm, ctx, what, listOf(t), block)
                        val message = attempt(block).error?.message
                        ctx.expect(message != null && dtype.name in message) { "$what: the message must name $dtype, got \"$message\"" }
                    }
                    check("allReduce($dtype, $op)") { comm.allReduce(t, op) }
                    check("reduce($dtype, $op)") { comm.reduce(t, 0, op) }
                    check("reduceScatter($dtype, $op)") { comm.reduceScatter(t, op) }
                }
                // Data movement still carries the dtype.
                val x = ctx.options.placement.toBackend(TestData.input(ctx.seed, 200, comm.rank, dtype, listOf(2 * n)))
                comm.broadcast(x, 0)
                TestData.exactMismatch(TestData.input(ctx.seed, 200, 0, dtype, listOf(2 * n)), ctx.options.placement.toHost(x))
                    ?.let { ctx.fail("broadcast of $dtype (a dtype moved but not reduced): $it") }
            }
            stillUsable(comm, ctx, "refused reductions of dtypes the backend does not reduce")
        },
        ConformanceCase("arguments: Avg on Bool is refused", CaseKind.Collective,
            skipReason = { o, _ -> if (DType.Bool !in o.dtypes) "the backend has no Bool" else null }) { comm, ctx ->
            val n = comm.worldSize
            val t = input(ctx, DType.Bool, 2 * n)
            refused(comm, ctx, "allReduce(Bool, Avg)", listOf(t)) { comm.allReduce(t, ReduceOp.Avg) }
            refused(comm, ctx, "reduce(Bool, Avg)", listOf(t)) { comm.reduce(t, 0, ReduceOp.Avg) }
            refused(comm, ctx, "reduceScatter(Bool, Avg)", listOf(t)) { comm.reduceScatter(t, ReduceOp.Avg) }
            stillUsable(comm, ctx, "refused Avg on Bool")
        },
        ConformanceCase("arguments: wrong output shape or dtype for Into variants is refused", CaseKind.Collective) { comm, ctx ->
            val n = comm.worldSize
            val dt = anyDtype(ctx)
            val other = ctx.options.dtypes.firstOrNull { it != dt }
            val t = input(ctx, dt, 2 * n, 3)
            val wrongGather = input(ctx, dt, 2 * n * n + 1, 3)
            refused(comm, ctx, "allGatherInto with output shape ${wrongGather.shape}", listOf(wrongGather, t)) { comm.allGatherInto(wrongGather, t) }
            val wrongRs = input(ctx, dt, 2, 4)
            refused(comm, ctx, "reduceScatterInto with output shape ${wrongRs.shape}", listOf(wrongRs, t)) { comm.reduceScatterInto(wrongRs, t) }
            if (other != null) {
                val wrongType = input(ctx, other, 2 * n * n, 3)
                refused(comm, ctx, "allGatherInto with a $other output for a $dt input", listOf(wrongType, t)) { comm.allGatherInto(wrongType, t) }
            }
            stillUsable(comm, ctx, "refused output tensors")
        },
        ConformanceCase("arguments: point-to-point peers and tags out of range are refused", CaseKind.Collective,
            skipReason = { o, _ ->
                if (!o.pointToPoint) "the backend does not support point-to-point"
                else if (!o.taggedPointToPoint) "the backend matches messages by order only; its own tests refuse tags and wildcards"
                else null
            }) { comm, ctx ->
            val n = comm.worldSize
            val t = input(ctx, anyDtype(ctx), 4)
            refused(comm, ctx, "send(dst = $n)", listOf(t)) { comm.send(t, n) }
            refused(comm, ctx, "send(dst = ANY_SOURCE)", listOf(t)) { comm.send(t, Communicator.ANY_SOURCE) }
            refused(comm, ctx, "send(tag = -2)", listOf(t)) { comm.send(t, 0, -2) }
            refused(comm, ctx, "recv(src = $n)", listOf(t)) { comm.recv(t, n) }
            refused(comm, ctx, "recv(tag = -5)", listOf(t)) { comm.recv(t, 0, -5) }
            stillUsable(comm, ctx, "refused peers and tags")
        },
            ConformanceCase("arguments: a sendRecv batch with one bad element issues nothing", CaseKind.Collective, minWorldSize = 2,
            skipReason = { o, _ -> if (!o.pointToPoint) "the backend does not support point-to-point" else null }) { comm, ctx ->
            val n = comm.worldSize
            val me = comm.rank
            val p = ctx.options.placement
            val dt = anyDtype(ctx)
            val next = (me + 1) % n
            val prev = (me + n - 1) % n
            // A valid send listed before the bad element: had it been issued, the next exchange would
            // receive this stray message (other data) instead of its own.
            val stray = p.toBackend(TestData.input(ctx.seed, 600, me, dt, listOf(4)))
            val buf = input(ctx, dt, 4)
            refused(comm, ctx, "sendRecv with a send to rank $n", listOf(stray, buf)) {
                comm.sendRecv(listOf(PointToPoint.send(stray, next), PointToPoint.recv(buf, prev), PointToPoint.send(stray, n)))
            }
            refused(comm, ctx, "sendRecv with two receives into one buffer", listOf(stray, buf)) {
                comm.sendRecv(listOf(PointToPoint.send(stray, next), PointToPoint.recv(buf, prev), PointToPoint.recv(buf, next)))
            }
            val out = p.toBackend(TestData.input(ctx.seed, 601, me, dt, listOf(4)))
            val got = p.toBackend(Tensor.zeros(dt, 4))
            comm.sendRecv(listOf(PointToPoint.recv(got, prev), PointToPoint.send(out, next)))
            TestData.exactMismatch(TestData.input(ctx.seed, 601, prev, dt, listOf(4)), p.toHost(got))
                ?.let { ctx.fail("the exchange after the refused batches received another message (was an element of a refused batch issued?): $it") }
            stillUsable(comm, ctx, "refused sendRecv batches")
        },
    )
}
