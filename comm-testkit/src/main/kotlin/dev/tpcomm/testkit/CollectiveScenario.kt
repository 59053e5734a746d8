package dev.tpcomm.testkit

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.spi.CollectiveShapes
import kotlin.random.Random

/** The collectives a [CollectiveScenario] can exercise. */
internal enum class Collective(val needsOp: Boolean, val divisible: Boolean, val hasRoot: Boolean, val hasDim: Boolean) {
    AllReduce(true, false, false, false),
    Broadcast(false, false, true, false),
    Reduce(true, false, true, false),
    AllGather(false, false, false, true),
    ReduceScatter(true, true, false, true),
    Gather(false, false, true, true),
    Scatter(false, true, true, true),
    AllToAll(false, true, false, true),
    Barrier(false, false, false, false),
}

/**
 * One collective call with all its parameters, as drawn by [ScenarioGenerator]. Inputs come from
 * [TestData.input] with ([CaseContext.seed], [salt], rank). The `toString` is the reproduction recipe.
 *
 * @property everyRoot broadcast from every root in turn (several calls).
 * @property crossCheck reduce-scatter also compared with the chunk of an all-reduce (two calls).
 * @property into use the `*Into` variant with a preallocated output.
 */
internal data class CollectiveScenario(
    val kind: Collective,
    val dtype: DType,
    val shape: List<Int>,
    val dim: Int = 0,
    val op: ReduceOp = ReduceOp.Sum,
    val root: Int = 0,
    val salt: Long = 0,
    val into: Boolean = false,
    val everyRoot: Boolean = false,
    val crossCheck: Boolean = false,
) {
    /** The op rank [rank] passes: [op], except that ranks pass different [ReduceOp.PreMulSum] factors ([preMulSum]). */
    fun opOf(rank: Int): ReduceOp = (op as? ReduceOp.PreMulSum)?.let { preMulSum(it.factor, rank) } ?: op

    /** Every rank's op ([opOf]), for the reference. */
    fun ops(worldSize: Int): List<ReduceOp> = List(worldSize) { opOf(it) }

    companion object {
        /**
         * Rank [rank]'s PreMulSum for a scenario whose factor is [base]: `base * (1 + rank % 3) / 2`,
         * so ranks pass different factors, as NCCL allows (each rank creates its own operator).
         */
        fun preMulSum(base: Double, rank: Int): ReduceOp.PreMulSum = ReduceOp.PreMulSum(base * (1 + rank % 3) / 2)

        /** The ops the suite reduces [dtype] with on a backend with [options]: the performed fixed ops, and PreMulSum(1 / worldSize) on floating point. */
        fun opsFor(options: ConformanceOptions, dtype: DType, worldSize: Int): List<ReduceOp> =
            (ReduceOp.entries + ReduceOp.PreMulSum(1.0 / worldSize)).filter { options.performs(it, dtype) }
    }
}

/** Draws random [CollectiveScenario]s that a backend with the given options supports. */
internal object ScenarioGenerator {
    fun next(
        random: Random,
        worldSize: Int,
        options: ConformanceOptions,
        kinds: List<Collective> = Collective.entries,
        maxElements: Int = options.maxElements,
        multiCall: Boolean = true,
    ): CollectiveScenario {
        val kind = kinds[random.nextInt(kinds.size)]
        // A reduction draws among the dtypes the backend reduces (options.reducedDtypes).
        val dtypes = options.dtypes.sortedBy { it.ordinal }.filter { d -> !kind.needsOp || ReduceOp.entries.any { options.performs(it, d) } }
        val dtype = dtypes[random.nextInt(dtypes.size)]
        val ops = CollectiveScenario.opsFor(options, dtype, worldSize)
        val op = if (kind.needsOp) ops[random.nextInt(ops.size)] else ReduceOp.Sum
        val rank = 1 + random.nextInt(3)
        val dimIndex = random.nextInt(rank)
        val large = maxElements / worldSize >= 1024 && random.nextInt(8) == 0
        val shape = MutableList(rank) { 1 + random.nextInt(if (large) 1 else 4) }
        if (large) {
            // One long dimension: exercises backends that reduce in parallel chunks.
            val length = 1024 + random.nextInt(maxElements / worldSize - 1024 + 1)
            shape[dimIndex] = length
        }
        if (kind.divisible) shape[dimIndex] = worldSize * (if (large) maxOf(1, shape[dimIndex] / worldSize) else 1 + random.nextInt(3))
        val dim = if (random.nextBoolean()) dimIndex else dimIndex - rank
        return CollectiveScenario(
            kind = kind,
            dtype = dtype,
            shape = shape,
            dim = if (kind.hasDim) dim else 0,
            op = op,
            root = if (kind.hasRoot) random.nextInt(worldSize) else 0,
            salt = random.nextLong(),
            into = (kind == Collective.AllGather || kind == Collective.ReduceScatter) && random.nextBoolean(),
            everyRoot = multiCall && kind == Collective.Broadcast && random.nextBoolean(),
            crossCheck = multiCall && kind == Collective.ReduceScatter,
        )
    }
}

/** Runs [CollectiveScenario]s on a communicator and checks the results against the references. */
internal object ScenarioRunner {
    /**
     * Issues the scenario's collective(s) on [comm] and records in [ctx] every way the results
     * differ from the sequential reference. The first collective is issued before this function
     * first suspends (the inputs are built before), so a scenario started with
     * `CoroutineStart.UNDISPATCHED` keeps program order.
     */
    suspend fun run(comm: Communicator, sc: CollectiveScenario, ctx: CaseContext) {
        val n = comm.worldSize
        val me = comm.rank
        val p = ctx.options.placement
        val inputs = List(n) { TestData.input(ctx.seed, sc.salt, it, sc.dtype, sc.shape) }
        val mine = inputs[me]
        fun exact(what: String, expected: Tensor, actual: Tensor) {
            TestData.exactMismatch(expected, actual)?.let { ctx.fail("$sc: $what: $it") }
        }
        val op = sc.opOf(me)
        fun reduction(what: String, refInputs: List<Tensor>, actual: Tensor) {
            ReferenceReduction.firstMismatch(sc.ops(n), refInputs, actual)?.let { ctx.fail("$sc: $what: $it") }
        }
        when (sc.kind) {
            Collective.AllReduce -> {
                val t = p.toBackend(mine.copy())
                val r = comm.allReduce(t, op)
                ctx.expect(r === t) { "$sc: allReduce must return the tensor it was given (in place)" }
                reduction("allReduce result", inputs, p.toHost(t))
            }
            Collective.Broadcast -> {
                val roots = if (sc.everyRoot) (0 until n).toList() else listOf(sc.root)
                for (root in roots) {
                    val t = p.toBackend(mine.copy())
                    val r = comm.broadcast(t, root)
                    ctx.expect(r === t) { "$sc: broadcast must return the tensor it was given (in place)" }
                    exact("broadcast from root $root", inputs[root], p.toHost(t))
                }
            }
            Collective.Reduce -> {
                val t = p.toBackend(mine.copy())
                val r = comm.reduce(t, sc.root, op)
                ctx.expect(r === t) { "$sc: reduce must return the tensor it was given (in place)" }
                if (me == sc.root) reduction("reduce result on the root", inputs, p.toHost(t))
                else exact("a non-root's tensor must be unchanged by reduce", mine, p.toHost(t))
            }
            Collective.AllGather -> {
                val t = p.toBackend(mine.copy())
                val out = if (sc.into) {
                    val o = p.toBackend(Tensor.zeros(sc.dtype, CollectiveShapes.allGather(mine, n, sc.dim)))
                    val r = comm.allGatherInto(o, t, sc.dim)
                    ctx.expect(r === o) { "$sc: allGatherInto must return its output tensor" }
                    o
                } else comm.allGather(t, sc.dim)
                val host = p.toHost(out)
                exact("allGather result", Tensor.concat(inputs, sc.dim), host)
                if (host.shape == Tensor.concat(inputs, sc.dim).shape) {
                    host.chunk(n, sc.dim).forEachIndexed { i, c -> exact("allGather then chunk($n, ${sc.dim})[$i] must give back rank $i's input", inputs[i], c) }
                }
                exact("allGather's input must be unchanged", mine, p.toHost(t))
            }
            Collective.ReduceScatter -> {
                val t = p.toBackend(mine.copy())
                val out = if (sc.into) {
                    val o = p.toBackend(Tensor.zeros(sc.dtype, CollectiveShapes.reduceScatter(mine, n, sc.dim)))
                    val r = comm.reduceScatterInto(o, t, op, sc.dim)
                    ctx.expect(r === o) { "$sc: reduceScatterInto must return its output tensor" }
                    o
                } else comm.reduceScatter(t, op, sc.dim)
                val host = p.toHost(out)
                val chunks = inputs.map { it.chunk(n, sc.dim)[me] }
                reduction("reduceScatter result (chunk $me of the reduction)", chunks, host)
                exact("reduceScatter's input must be unchanged", mine, p.toHost(t))
                if (sc.crossCheck) {
                    val a = p.toBackend(mine.copy())
                    comm.allReduce(a, op)
                    val arChunk = p.toHost(a).chunk(n, sc.dim)[me]
                    reduction("chunk $me of allReduce (compared with reduceScatter)", chunks, arChunk)
                    if (!sc.dtype.isFloatingPoint) exact("reduceScatter must equal chunk $me of allReduce", arChunk, host)
                }
            }
            Collective.Gather -> {
                val t = p.toBackend(mine.copy())
                val out = comm.gather(t, sc.root, sc.dim)
                if (me == sc.root) {
                    if (out == null) ctx.fail("$sc: gather returned null on the root")
                    else exact("gather result on the root", Tensor.concat(inputs, sc.dim), p.toHost(out))
                } else {
                    ctx.expect(out == null) { "$sc: gather must return null on non-root rank $me" }
                }
                exact("gather's input must be unchanged", mine, p.toHost(t))
            }
            Collective.Scatter -> {
                val chunkShape = CollectiveShapes.reduceScatter(mine, n, sc.dim)
                val output = p.toBackend(Tensor.zeros(sc.dtype, chunkShape))
                // Non-roots pass null half of the time and their own (ignored) tensor otherwise.
                val input = if (me == sc.root || sc.salt and 1L == 0L) p.toBackend(mine.copy()) else null
                comm.scatter(output, input, sc.root, sc.dim)
                exact("scatter: chunk $me of root ${sc.root}'s input", inputs[sc.root].chunk(n, sc.dim)[me], p.toHost(output))
                if (input != null) exact("scatter's input must be unchanged", mine, p.toHost(input))
            }
            Collective.AllToAll -> {
                val t = p.toBackend(mine.copy())
                val out = comm.allToAll(t, sc.dim)
                val expected = Tensor.concat(List(n) { i -> inputs[i].chunk(n, sc.dim)[me] }, sc.dim)
                exact("allToAll result (chunk i from rank i)", expected, p.toHost(out))
                exact("allToAll's input must be unchanged", mine, p.toHost(t))
            }
            Collective.Barrier -> comm.barrier()
        }
    }
}
