package dev.tpcomm.testkit

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.MessageInfo
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.CommunicationException
import dev.tpcomm.PointToPoint
import dev.tpcomm.allGatherObject
import dev.tpcomm.broadcastObject
import dev.tpcomm.gatherObject
import dev.tpcomm.recvObject
import dev.tpcomm.scatterObject
import dev.tpcomm.sendObject
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import kotlinx.serialization.Serializable

/** A data class the object-collective case sends around (nested, nullable, a map, non-ASCII text). */
@Serializable
internal data class ConformanceRecord(
    val rank: Int,
    val name: String,
    val values: List<Double>,
    val counts: Map<String, Long>,
    val nested: Nested?,
) {
    @Serializable
    internal data class Nested(val flag: Boolean, val text: String)

    companion object {
        fun of(rank: Int, seed: Long): ConformanceRecord = ConformanceRecord(
            rank = rank,
            name = "rank-$rank-ü-" + "x".repeat(rank * 7),
            values = List(rank + 1) { it * 0.5 + seed % 7 },
            counts = (0..rank).associate { "k$it" to it.toLong() * seed },
            nested = if (rank % 2 == 0) Nested(rank % 4 == 0, "nested $rank") else null,
        )
    }
}

/** The [CaseKind.Collective] cases: correct programs whose results are checked, and refused bad arguments. */
internal object CollectiveCases {
    private fun collective(name: String, minWorldSize: Int = 1, skip: (ConformanceOptions, Int) -> String? = { _, _ -> null }, body: suspend (Communicator, CaseContext) -> Unit) =
        ConformanceCase(name, CaseKind.Collective, minWorldSize, skip, body)

    private suspend fun scenario(comm: Communicator, ctx: CaseContext, sc: CollectiveScenario) = ScenarioRunner.run(comm, sc, ctx)

    private fun dtypes(ctx: CaseContext) = ctx.options.dtypes.sortedBy { it.ordinal }

    private fun ops(ctx: CaseContext, dtype: DType, worldSize: Int) = CollectiveScenario.opsFor(ctx.options, dtype, worldSize)

    /** The dtypes the backend sums (the default op of a reduction). */
    private fun summed(ctx: CaseContext) = dtypes(ctx).filter { ctx.options.performs(ReduceOp.Sum, it) }

    val all: List<ConformanceCase> = listOf(
        collective("allReduce: every dtype and op") { comm, ctx ->
            for (dtype in dtypes(ctx)) for (op in ops(ctx, dtype, comm.worldSize)) {
                scenario(comm, ctx, CollectiveScenario(Collective.AllReduce, dtype, listOf(3, 5), op = op, salt = ctx.random.nextLong()))
            }
        },
        // What a training loop reduces between steps (a loss, a count, a norm): a backend may move
        // a few elements another way than large ones (MPI carries up to 48 bytes in its consistency
        // check's all-gather and reduces them on the host).
        collective("a few elements: allReduce and broadcast of a scalar, 2 and 3 x 4, every dtype and op") { comm, ctx ->
            var root = 0
            for (dtype in dtypes(ctx)) for (shape in listOf(emptyList(), listOf(2), listOf(3, 4))) {
                for (op in ops(ctx, dtype, comm.worldSize)) {
                    scenario(comm, ctx, CollectiveScenario(Collective.AllReduce, dtype, shape, op = op, salt = ctx.random.nextLong()))
                }
                scenario(comm, ctx, CollectiveScenario(Collective.Broadcast, dtype, shape, root = root++ % comm.worldSize, salt = ctx.random.nextLong()))
            }
        },
        collective("broadcast: from every root, every dtype") { comm, ctx ->
            for (dtype in dtypes(ctx)) {
                scenario(comm, ctx, CollectiveScenario(Collective.Broadcast, dtype, listOf(2, 3, 2), everyRoot = true, salt = ctx.random.nextLong()))
            }
        },
        collective("reduce: to every root, every dtype and op") { comm, ctx ->
            var i = 0
            for (dtype in dtypes(ctx)) for (op in ops(ctx, dtype, comm.worldSize)) {
                scenario(comm, ctx, CollectiveScenario(Collective.Reduce, dtype, listOf(11), op = op, root = i++ % comm.worldSize, salt = ctx.random.nextLong()))
            }
            for (root in 0 until comm.worldSize) {
                scenario(comm, ctx, CollectiveScenario(Collective.Reduce, DType.Float32.takeIf { it in ctx.options.reducedDtypes } ?: summed(ctx)[0], listOf(4), root = root, salt = ctx.random.nextLong()))
            }
        },
        collective("allGather: every dim and dtype, allocating and Into") { comm, ctx ->
            val n = comm.worldSize
            for (dtype in dtypes(ctx)) for (dim in -3..2) for (into in listOf(false, true)) {
                scenario(comm, ctx, CollectiveScenario(Collective.AllGather, dtype, listOf(2, 3, 1 + n % 3), dim = dim, into = into, salt = ctx.random.nextLong()))
            }
        },
        collective("reduceScatter: every dim, dtype and op, equal to the chunk of an allReduce") { comm, ctx ->
            val n = comm.worldSize
            for (dtype in dtypes(ctx)) for ((k, op) in ops(ctx, dtype, comm.worldSize).withIndex()) {
                val dim = k % 3
                val shape = MutableList(3) { 2 }.also { it[dim] = 2 * n }
                scenario(comm, ctx, CollectiveScenario(Collective.ReduceScatter, dtype, shape, dim = dim, op = op, into = k % 2 == 1, crossCheck = true, salt = ctx.random.nextLong()))
            }
            // PreMulSum along every dim: along dim 0 the input goes straight to the library, so a
            // backend that scales on the host must scale into a buffer of its own, not the input.
            for (dtype in dtypes(ctx).filter { ReduceOp.PreMulSum(1.0).supports(it) }) for (dim in 0..2) {
                val shape = MutableList(3) { 2 }.also { it[dim] = 2 * n }
                scenario(comm, ctx, CollectiveScenario(Collective.ReduceScatter, dtype, shape, dim = dim, op = ReduceOp.PreMulSum(1.0 / n), into = dim == 1, salt = ctx.random.nextLong()))
            }
        },
        collective("gather and scatter: every root and dim") { comm, ctx ->
            val n = comm.worldSize
            for (root in 0 until n) for (dim in 0..1) {
                val dtype = dtypes(ctx)[(root + dim) % ctx.options.dtypes.size]
                val shape = MutableList(2) { 3 }.also { it[dim] = n * 2 }
                scenario(comm, ctx, CollectiveScenario(Collective.Gather, dtype, shape, dim = dim, root = root, salt = ctx.random.nextLong()))
                scenario(comm, ctx, CollectiveScenario(Collective.Scatter, dtype, shape, dim = dim, root = root, salt = ctx.random.nextLong()))
            }
        },
        collective("allToAll: every dim and dtype") { comm, ctx ->
            val n = comm.worldSize
            for (dtype in dtypes(ctx)) for (dim in 0..2) {
                val shape = MutableList(3) { 2 }.also { it[dim] = n * 3 }
                scenario(comm, ctx, CollectiveScenario(Collective.AllToAll, dtype, shape, dim = dim, salt = ctx.random.nextLong()))
            }
        },
        collective("barrier: repeated, interleaved with allReduce") { comm, ctx ->
            repeat(10) {
                comm.barrier()
                scenario(comm, ctx, CollectiveScenario(Collective.AllReduce, summed(ctx).let { d -> d[it % d.size] }, listOf(1), salt = ctx.random.nextLong()))
            }
        },
        collective("large tensors: allReduce, allGather and reduceScatter of 4 x maxElements") { comm, ctx ->
            val n = comm.worldSize
            // Big enough for backends that split reductions and copies into parallel pieces.
            val length = ctx.options.maxElements * 4 / n * n
            val dtype = if (DType.Float32 in ctx.options.dtypes) DType.Float32 else dtypes(ctx)[0]
            val intType = if (DType.Int64 in ctx.options.dtypes) DType.Int64 else dtypes(ctx).last()
            scenario(comm, ctx, CollectiveScenario(Collective.AllReduce, dtype, listOf(length), salt = ctx.random.nextLong()))
            scenario(comm, ctx, CollectiveScenario(Collective.AllReduce, intType, listOf(length), salt = ctx.random.nextLong()))
            scenario(comm, ctx, CollectiveScenario(Collective.AllGather, dtype, listOf(length / n), salt = ctx.random.nextLong()))
            scenario(comm, ctx, CollectiveScenario(Collective.ReduceScatter, intType, listOf(length), crossCheck = true, salt = ctx.random.nextLong()))
        },
        collective("random collectives") { comm, ctx ->
            repeat(ctx.options.randomCollectives) {
                scenario(comm, ctx, ScenarioGenerator.next(ctx.random, comm.worldSize, ctx.options))
            }
        },
        collective("concurrent issue: UNDISPATCHED calls keep program order") { comm, ctx ->
            ConformanceSoak.run(comm, ctx, collectives = 200, concurrency = 16)
        },
        collective("object collectives: data classes round-trip", skip = { o, _ -> if (!o.objectCollectives) "the backend does not support object collectives" else null }) { comm, ctx ->
            val n = comm.worldSize
            val mine = ConformanceRecord.of(comm.rank, ctx.seed)
            val all = comm.allGatherObject(mine)
            ctx.expect(all == List(n) { ConformanceRecord.of(it, ctx.seed) }) { "allGatherObject returned $all" }
            for (root in 0 until n) {
                val got = comm.broadcastObject(if (comm.rank == root) ConformanceRecord.of(root, ctx.seed) else null, root)
                ctx.expect(got == ConformanceRecord.of(root, ctx.seed)) { "broadcastObject from root $root returned $got" }
            }
            val strings = comm.allGatherObject(listOf("a".repeat(comm.rank), ""))
            ctx.expect(strings == List(n) { listOf("a".repeat(it), "") }) { "allGatherObject of lists returned $strings" }
        },
        collective("object collectives: gatherObject, scatterObject and sendObject/recvObject of different sizes", skip = { o, _ -> if (!o.objectCollectives) "the backend does not support object collectives" else null }) { comm, ctx ->
            val n = comm.worldSize
            val me = comm.rank
            // Records of very different sizes per rank (the name grows with the rank).
            val expected = List(n) { ConformanceRecord.of(it, ctx.seed) }
            for (root in 0 until n) {
                val got = comm.gatherObject(ConformanceRecord.of(me, ctx.seed), root)
                if (me == root) ctx.expect(got == expected) { "gatherObject to root $root returned $got" }
                else ctx.expect(got == null) { "gatherObject to root $root returned $got on non-root $me" }
                val values = if (me == root) List(n) { ConformanceRecord.of(it + root, ctx.seed) } else null
                val mine = comm.scatterObject(values, root)
                ctx.expect(mine == ConformanceRecord.of(me + root, ctx.seed)) { "scatterObject from root $root returned $mine on rank $me" }
            }
            if (n > 1 && ctx.options.pointToPoint) {
                val next = (me + 1) % n
                val prev = (me + n - 1) % n
                // Even ranks send first, odd ranks receive first: deadlock-free also where an object message
                // completes only when received (NCCL/RCCL), for any world size.
                val mine = ConformanceRecord.of(me, ctx.seed)
                val got = if (me % 2 == 0) {
                    comm.sendObject(mine, next)
                    comm.recvObject<ConformanceRecord>(prev)
                } else {
                    comm.recvObject<ConformanceRecord>(prev).also { comm.sendObject(mine, next) }
                }
                ctx.expect(got == ConformanceRecord.of(prev, ctx.seed)) { "recvObject from $prev returned $got" }
            }
            comm.barrier()
        },
        collective("object collectives: a scatterObject with the wrong number of values fails on the root and names the root elsewhere", skip = { o, _ -> if (!o.objectCollectives) "the backend does not support object collectives" else null }) { comm, ctx ->
            val n = comm.worldSize
            val root = n - 1
            val r = attempt { comm.scatterObject(if (comm.rank == root) List(n + 1) { "v$it" } else null, root) }
            val e = r.error
            if (comm.rank == root) {
                ctx.expect(e is IllegalArgumentException && e.message!!.contains("one value per rank")) { "scatterObject with ${n + 1} values on the root: expected IllegalArgumentException, got ${e?.describe() ?: "a value"}" }
            } else {
                ctx.expect(e is CommunicationException && e.operation == "scatterObject" && e.message!!.contains("rank $root")) {
                    "scatterObject whose root passed ${n + 1} values: expected a CommunicationException naming the root, got ${e?.describe() ?: "a value"}"
                }
            }
            // Nothing was left half-done: the communicator still works.
            val all = comm.allGatherObject(comm.rank)
            ctx.expect(all == List(n) { it }) { "allGatherObject after the refused scatterObject returned $all" }
        },
    ) + UnevenCases.all + GroupCases.all + PointToPointCases.all + ArgumentCases.all
}

/** split and group: sub-communicators touch their members only. */
internal object GroupCases {
    private fun skip(o: ConformanceOptions, @Suppress("UNUSED_PARAMETER") n: Int) = if (!o.groups) "the backend does not support split/group" else null

    private suspend fun worldRanksInOrder(sub: Communicator, worldRank: Int, p: TensorPlacement): List<Long> =
        p.toHost(sub.allGather(p.toBackend(Tensor.of(longArrayOf(worldRank.toLong()))))).toLongArray().toList()

    val all: List<ConformanceCase> = listOf(
        ConformanceCase("split: colors and keys order the sub-communicators", CaseKind.Collective, 1, ::skip) { comm, ctx ->
            val n = comm.worldSize
            // Keys fall as ranks rise (with ties, broken by rank), so every group is reordered.
            val groups = maxOf(1, n / 2)
            val shift = ctx.random.nextInt(n)
            val colors = List(n) { (it + shift) % groups + ctx.random.nextInt(2) * groups }
            val keys = List(n) { (n - it) / 2 }
            val me = comm.rank
            val sub = comm.split(colors[me], keys[me])
            if (sub == null) { ctx.fail("split with color ${colors[me]} returned null on rank $me"); return@ConformanceCase }
            val members = (0 until n).filter { colors[it] == colors[me] }.sortedWith(compareBy({ keys[it] }, { it }))
            ctx.expect(sub.worldSize == members.size) { "split: sub-communicator of color ${colors[me]} has ${sub.worldSize} ranks, expected ${members.size} $members" }
            ctx.expect(sub.rank == members.indexOf(me)) { "split: world rank $me has sub-rank ${sub.rank}, expected ${members.indexOf(me)} (members by key: $members)" }
            val p = ctx.options.placement
            val order = worldRanksInOrder(sub, me, p)
            ctx.expect(order == members.map { it.toLong() }) { "split: allGather of world ranks in the sub-communicator gave $order, expected $members" }
            val t = p.toBackend(Tensor.of(longArrayOf(me + 1L, 1)))
            sub.allReduce(t)
            val sums = p.toHost(t).toLongArray().toList()
            val expected = listOf(members.sumOf { it + 1L }, members.size.toLong())
            ctx.expect(sums == expected) { "split: allReduce over members $members gave $sums, expected $expected" }
            sub.close()
            comm.barrier()
        },
        ConformanceCase("split: a null color is not a member and its buffers stay unchanged", CaseKind.Collective, 1, ::skip) { comm, ctx ->
            val n = comm.worldSize
            val me = comm.rank
            val colors = List(n) { if (it % 3 == 2 || (n > 1 && it == n - 1)) null else it % 2 }
            val p = ctx.options.placement
            val input = TestData.input(ctx.seed, 77, me, DType.Int32, listOf(6))
            val t = p.toBackend(input.copy())
            val sub = comm.split(colors[me], me)
            if (colors[me] == null) {
                ctx.expect(sub == null) { "split with a null color returned a communicator on rank $me" }
            } else if (sub == null) {
                ctx.fail("split with color ${colors[me]} returned null on rank $me")
            } else {
                val members = (0 until n).filter { colors[it] == colors[me] }
                sub.allReduce(t)
                ReferenceReduction.firstMismatch(ReduceOp.Sum, members.map { TestData.input(ctx.seed, 77, it, DType.Int32, listOf(6)) }, p.toHost(t))
                    ?.let { ctx.fail("split: allReduce over members $members: $it") }
                sub.close()
            }
            comm.barrier()
            if (colors[me] == null) TestData.exactMismatch(input, p.toHost(t))?.let { ctx.fail("split: non-member $me's buffer changed: $it") }
            // The parent still works for everyone, members and non-members alike.
            ScenarioRunner.run(comm, CollectiveScenario(Collective.AllReduce, DType.Int64, listOf(3), salt = 78), ctx)
        },
        ConformanceCase("group: members only, in the given order; the parent stays usable", CaseKind.Collective, 1, ::skip) { comm, ctx ->
            val n = comm.worldSize
            val me = comm.rank
            val size = 1 + ctx.random.nextInt(n)
            val members = (0 until n).shuffled(ctx.random).take(size)
            val scenario = ScenarioGenerator.next(ctx.random, size, ctx.options, listOf(Collective.AllReduce, Collective.AllGather, Collective.Broadcast, Collective.ReduceScatter))
            val p = ctx.options.placement
            val bystander = TestData.input(ctx.seed, 79, me, DType.Float32, listOf(5))
            val t = p.toBackend(bystander.copy())
            val g = comm.group(members)
            if (me in members) {
                if (g == null) ctx.fail("group($members) returned null on member $me")
                else {
                    ctx.expect(g.worldSize == size && g.rank == members.indexOf(me)) {
                        "group($members): rank $me got sub-rank ${g.rank} of ${g.worldSize}, expected ${members.indexOf(me)} of $size"
                    }
                    ctx.expect(worldRanksInOrder(g, me, p) == members.map { it.toLong() }) { "group($members): ranks are not in the given order" }
                    g.allReduce(t)
                    ScenarioRunner.run(g, scenario, ctx)
                    g.close()
                }
            } else {
                ctx.expect(g == null) { "group($members) returned a communicator on non-member $me" }
            }
            comm.barrier()
            if (me !in members) TestData.exactMismatch(bystander, p.toHost(t))?.let { ctx.fail("group: non-member $me's buffer changed: $it") }
            ScenarioRunner.run(comm, CollectiveScenario(Collective.AllGather, DType.Int32, listOf(2), salt = 80), ctx)
        },
        ConformanceCase("split: nested splits and two sub-communicators used concurrently", CaseKind.Collective, 2, ::skip) { comm, ctx ->
            val n = comm.worldSize
            val me = comm.rank
            val halves = comm.split(me % 2, me)!!
            val pairs = halves.split(halves.rank / 2, halves.rank)!!
            val halfMembers = (0 until n).filter { it % 2 == me % 2 }
            val pairMembers = halfMembers.filter { halfMembers.indexOf(it) / 2 == halfMembers.indexOf(me) / 2 }
            // Issue on both without waiting: each sub-communicator keeps its own program order.
            coroutineScope {
                val p = ctx.options.placement
                val a = async(start = CoroutineStart.UNDISPATCHED) { halves.allReduce(p.toBackend(Tensor.of(longArrayOf(1L shl me)))) }
                val b = async(start = CoroutineStart.UNDISPATCHED) { pairs.allReduce(p.toBackend(Tensor.of(longArrayOf(1L shl me)))) }
                val ha = p.toHost(a.await()).getLong(0)
                val pb = p.toHost(b.await()).getLong(0)
                ctx.expect(ha == halfMembers.sumOf { 1L shl it }) { "nested split: half allReduce gave ${ha.toString(2)}, expected members $halfMembers" }
                ctx.expect(pb == pairMembers.sumOf { 1L shl it }) { "nested split: pair allReduce gave ${pb.toString(2)}, expected members $pairMembers" }
            }
            pairs.close()
            halves.close()
            comm.barrier()
        },
    )
}

/** send, recv and probe. */
internal object PointToPointCases {
    private fun skipUntagged(o: ConformanceOptions, @Suppress("UNUSED_PARAMETER") n: Int) =
        if (!o.pointToPoint) "the backend does not support point-to-point" else null

    private fun skip(o: ConformanceOptions, n: Int) = skipUntagged(o, n)
        ?: if (!o.taggedPointToPoint) "the backend matches messages by order only (no tags, ANY_SOURCE or probe)" else null

    val all: List<ConformanceCase> = listOf(
        ConformanceCase("point-to-point: ring exchange, tag 0, messages matched in order", CaseKind.Collective, 2, ::skipUntagged) { comm, ctx ->
            // The exchange that must progress together: every rank sends to its successor while it
            // receives from its predecessor (on NCCL this deadlocks unless the pair is issued as one
            // group, NVIDIA/nccl docs/userguide/source/usage/p2p.rst). Two rounds check the order.
            val n = comm.worldSize
            val me = comm.rank
            val p = ctx.options.placement
            val next = (me + 1) % n
            val prev = (me + n - 1) % n
            for (dtype in ctx.options.dtypes.sortedBy { it.ordinal }) {
                for (round in 0 until 2) {
                    val salt = 300L + 10 * dtype.ordinal + round
                    val out = TestData.input(ctx.seed, salt, me, dtype, listOf(64, 3))
                    val buf = p.toBackend(Tensor.zeros(dtype, 64, 3))
                    val info = coroutineScope {
                        val sent = async(start = CoroutineStart.UNDISPATCHED) { comm.send(p.toBackend(out.copy()), next, 0) }
                        val info = comm.recv(buf, prev, 0)
                        sent.await()
                        info
                    }
                    ctx.expect(info.source == prev && info.byteSize == out.byteSize) { "recv from $prev returned $info" }
                    TestData.exactMismatch(TestData.input(ctx.seed, salt, prev, dtype, listOf(64, 3)), p.toHost(buf))
                        ?.let { ctx.fail("ring $dtype round $round: $it") }
                }
            }
            comm.barrier()
        },
        ConformanceCase("sendRecv: a batched ring exchange completes in any order, messages above the eager limit included", CaseKind.Collective, 2, ::skipUntagged) { comm, ctx ->
            // Every rank sends to both neighbours and receives from both in one batch; odd ranks list
            // their receives first, even ranks their sends first, and a large round exceeds the
            // libraries' eager limits (such sends complete only when matched): a backend that issued
            // the elements one after another would deadlock here.
            val n = comm.worldSize
            val me = comm.rank
            val p = ctx.options.placement
            val next = (me + 1) % n
            val prev = (me + n - 1) % n
            val rounds = ctx.options.dtypes.sortedBy { it.ordinal }.map { it to listOf(5, 3) } +
                listOf((if (DType.Int32 in ctx.options.dtypes) DType.Int32 else ctx.options.dtypes.minBy { it.ordinal }) to listOf(ctx.options.maxElements * 16))
            for ((k, round) in rounds.withIndex()) {
                val (dtype, shape) = round
                fun data(rank: Int, direction: Int) = TestData.input(ctx.seed, 400L + 2 * k + direction, rank, dtype, shape)
                val fromPrev = p.toBackend(Tensor.zeros(dtype, shape))
                val fromNext = p.toBackend(Tensor.zeros(dtype, shape))
                // With two ranks both neighbours are one rank: its messages match in the order listed, so
                // the sends (to next, then to prev) and the receives (from prev, then from next) keep their own order.
                val sends = listOf(PointToPoint.send(p.toBackend(data(me, 0)), next), PointToPoint.send(p.toBackend(data(me, 1)), prev))
                val recvs = listOf(PointToPoint.recv(fromPrev, prev), PointToPoint.recv(fromNext, next))
                val infos = comm.sendRecv(if (me % 2 == 1) recvs + sends else sends + recvs)
                val recvInfos = if (me % 2 == 1) infos.take(2) else infos.drop(2)
                ctx.expect(infos.size == 4) { "sendRecv of 4 elements returned ${infos.size} MessageInfo" }
                ctx.expect(recvInfos.map { it.source } == listOf(prev, next) && recvInfos.all { it.byteSize == fromPrev.byteSize }) {
                    "sendRecv $dtype$shape: the receives returned $recvInfos"
                }
                TestData.exactMismatch(data(prev, 0), p.toHost(fromPrev))?.let { ctx.fail("sendRecv $dtype$shape, from prev $prev: $it") }
                TestData.exactMismatch(data(next, 1), p.toHost(fromNext))?.let { ctx.fail("sendRecv $dtype$shape, from next $next: $it") }
            }
            ctx.expect(comm.sendRecv(emptyList()).isEmpty()) { "an empty sendRecv batch returned something" }
            comm.barrier()
        },
        ConformanceCase("sendRecv: every pair in one batch each, with tags and ANY_SOURCE, listed in reverse", CaseKind.Collective, 2, ::skip) { comm, ctx ->
            val n = comm.worldSize
            val me = comm.rank
            val p = ctx.options.placement
            fun data(src: Int, dst: Int) = TestData.input(ctx.seed, 500L + dst, src, DType.Int64, listOf(src + 2))
            val peers = (0 until n).filter { it != me }
            val bufs = peers.associateWith { src -> p.toBackend(Tensor.zeros(DType.Int64, src + 2)) }
            // Tag = sender, so each receive names its message by tag alone (ANY_SOURCE).
            val ops = peers.map { dst -> PointToPoint.send(p.toBackend(data(me, dst)), dst, me + 1) } +
                peers.map { src -> PointToPoint.recv(bufs.getValue(src), Communicator.ANY_SOURCE, src + 1) }
            val infos = comm.sendRecv(ops.reversed()).reversed()
            for ((i, src) in peers.withIndex()) {
                val info = infos[peers.size + i]
                ctx.expect(info == MessageInfo(src, src + 1, 8L * (src + 2))) { "sendRecv: the receive of tag ${src + 1} returned $info" }
                TestData.exactMismatch(data(src, me), p.toHost(bufs.getValue(src)))?.let { ctx.fail("sendRecv from $src: $it") }
            }
            comm.barrier()
        },
        ConformanceCase("point-to-point: ring send/recv with tags", CaseKind.Collective, 2, ::skip) { comm, ctx ->
            val n = comm.worldSize
            val me = comm.rank
            val p = ctx.options.placement
            val next = (me + 1) % n
            val prev = (me + n - 1) % n
            for (dtype in ctx.options.dtypes.sortedBy { it.ordinal }) {
                val tag = dtype.ordinal + 3
                val out = TestData.input(ctx.seed, 90L + tag, me, dtype, listOf(4, 3))
                val buf = p.toBackend(Tensor.zeros(dtype, 4, 3))
                val info = coroutineScope {
                    val sent = async(start = CoroutineStart.UNDISPATCHED) { comm.send(p.toBackend(out.copy()), next, tag) }
                    val info = comm.recv(buf, prev, tag)
                    sent.await()
                    info
                }
                ctx.expect(info == MessageInfo(prev, tag, out.byteSize)) { "recv from $prev with tag $tag returned $info" }
                TestData.exactMismatch(TestData.input(ctx.seed, 90L + tag, prev, dtype, listOf(4, 3)), p.toHost(buf))?.let { ctx.fail("ring $dtype: $it") }
            }
            comm.barrier()
        },
        ConformanceCase("point-to-point: ANY_SOURCE, ANY_TAG, probe and per-pair ordering", CaseKind.Collective, 2, ::skip) { comm, ctx ->
            val n = comm.worldSize
            val me = comm.rank
            val p = ctx.options.placement
            fun payload(src: Int, k: Int) = TestData.input(ctx.seed, 100L + k, src, DType.Int32, listOf(src + 1))
            // Phase 1: every other rank sends one message (its own size and tag); rank 0 probes with both wildcards.
            if (me == 0) {
                val seen = mutableSetOf<Int>()
                repeat(n - 1) {
                    val probed = comm.probe(Communicator.ANY_SOURCE, Communicator.ANY_TAG)
                    ctx.expect(probed.tag == probed.source * 10 && probed.byteSize == 4L * (probed.source + 1)) { "probe returned $probed" }
                    val buf = p.toBackend(Tensor.zeros(DType.Int32, (probed.byteSize / 4).toInt()))
                    val info = comm.recv(buf, probed.source, Communicator.ANY_TAG)
                    ctx.expect(info == probed) { "recv after probe returned $info, probe said $probed" }
                    seen += info.source
                    TestData.exactMismatch(payload(info.source, 0), p.toHost(buf))?.let { ctx.fail("message from ${info.source}: $it") }
                }
                ctx.expect(seen == (1 until n).toSet()) { "ANY_SOURCE received from $seen, expected ${(1 until n).toSet()}" }
            } else {
                comm.send(p.toBackend(payload(me, 0)), 0, me * 10)
            }
            comm.barrier()
            // Phase 2: three messages from rank 1 with one tag arrive in the order sent.
            if (me == 0) {
                repeat(3) { k ->
                    val buf = p.toBackend(Tensor.zeros(DType.Int32, 2))
                    val info = comm.recv(buf, Communicator.ANY_SOURCE, 5)
                    ctx.expect(info == MessageInfo(1, 5, 8)) { "ordered message $k: recv returned $info" }
                    TestData.exactMismatch(payload(1, k + 1), p.toHost(buf))?.let { ctx.fail("ordered message $k: $it") }
                }
            } else if (me == 1) {
                repeat(3) { k -> comm.send(p.toBackend(payload(1, k + 1)), 0, 5) }
            }
            comm.barrier()
        },
    )
}
