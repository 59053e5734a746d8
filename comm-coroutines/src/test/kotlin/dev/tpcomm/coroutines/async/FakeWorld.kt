package dev.tpcomm.coroutines.async

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommunicationException
import dev.tpcomm.Communicator
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.Device
import dev.tpcomm.MessageInfo
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.spi.CollectiveChecks
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.CancellationException
import java.util.Collections
import java.util.concurrent.atomic.AtomicLong

/**
 * A minimal in-memory world for testing the helpers independently of the local backend.
 *
 * Collectives are matched by per-communicator sequence number and registered synchronously
 * before the first suspension (so UNDISPATCHED issue order is observable). Each slot checks that
 * every rank called the same operation; cancellation of a waiting call aborts the group. Every
 * issued operation is logged per rank in [log] for ordering assertions.
 */
class FakeWorld(val size: Int) {
    fun communicators(): List<FakeComm> {
        val group = Group(size)
        return List(size) { FakeComm(group, it) }
    }

    class Group(val size: Int) {
        private val lock = Any()
        private val slots = HashMap<Long, Slot>()
        @Volatile var abortCause: Throwable? = null
        val log: MutableList<String> = Collections.synchronizedList(ArrayList())

        class Slot(size: Int, val operation: String) {
            val values = arrayOfNulls<Any?>(size)
            var arrived = 0
            val done = CompletableDeferred<List<Any?>>()
        }

        fun arrive(rank: Int, seq: Long, operation: String, value: Any?): Slot = synchronized(lock) {
            abortCause?.let { throw aborted(rank, operation, seq, it) }
            log += "$rank:$operation"
            val slot = slots.getOrPut(seq) { Slot(size, operation) }
            if (slot.operation != operation) {
                val e = CollectiveMismatchException(
                    "rank $rank called $operation but another rank called ${slot.operation}",
                    rank, "fake", operation, seq, listOf(rank), listOf("operation"),
                )
                abortLocked(e)
                throw e
            }
            slot.values[rank] = value
            slot.arrived++
            if (slot.arrived == size) {
                slots.remove(seq)
                slot.done.complete(slot.values.toList())
            }
            slot
        }

        fun abort(cause: Throwable) = synchronized(lock) { abortLocked(cause) }

        private fun abortLocked(cause: Throwable) {
            if (abortCause != null) return
            abortCause = cause
            for ((seq, slot) in slots) slot.done.completeExceptionally(aborted(-1, slot.operation, seq, cause))
            slots.clear()
        }

        fun aborted(rank: Int, operation: String, seq: Long, cause: Throwable) =
            CommunicatorAbortedException("communicator aborted: $cause", rank, "fake", operation, seq, cause)
    }
}

class FakeComm(val group: FakeWorld.Group, override val rank: Int) : Communicator {
    override val worldSize: Int get() = group.size
    override val backendName: String get() = "fake"
    override val device: Device get() = Device.Host
    private val sequence = AtomicLong(0)

    /** Operations issued so far by all ranks of this group, as `rank:operation`. */
    val log: List<String> get() = synchronized(group.log) { group.log.toList() }

    private suspend fun exchange(operation: String, value: Any?): List<Any?> = exchangeWithSeq(operation, value).second

    private suspend fun exchangeWithSeq(operation: String, value: Any?): Pair<Long, List<Any?>> {
        val seq = sequence.incrementAndGet()
        val slot = group.arrive(rank, seq, operation, value)
        try {
            return seq to slot.done.await()
        } catch (e: CancellationException) {
            group.abort(e)
            throw e
        } catch (e: CommunicationException) {
            throw e
        }
    }

    override suspend fun allReduce(tensor: Tensor, op: ReduceOp): Tensor {
        CollectiveChecks.device(tensor, device, "allReduce")
        CollectiveChecks.op(op, tensor.dtype, "allReduce")
        val all = exchange("allReduce(${tensor.dtype},${tensor.numel},$op)", tensor.toDoubleArray())
        val arrays = all.map { it as DoubleArray }
        for (i in 0 until tensor.numel.toInt()) {
            val xs = arrays.map { it[i] }
            val v = when (op) {
                ReduceOp.Sum -> xs.sum()
                ReduceOp.Avg -> xs.sum() / xs.size
                ReduceOp.Max -> xs.max()
                ReduceOp.Min -> xs.min()
                ReduceOp.Product -> xs.fold(1.0) { a, b -> a * b }
                else -> error("fake world does not do $op")
            }
            tensor.setDouble(i.toLong(), v)
        }
        return tensor
    }

    override suspend fun broadcast(tensor: Tensor, root: Int): Tensor {
        CollectiveChecks.root(root, worldSize, "broadcast")
        val all = exchange("broadcast($root)", if (rank == root) tensor.toDoubleArray() else null)
        val src = all[root] as DoubleArray
        for (i in src.indices) tensor.setDouble(i.toLong(), src[i])
        return tensor
    }

    override suspend fun reduce(tensor: Tensor, root: Int, op: ReduceOp): Tensor {
        val copy = tensor.copy()
        allReduce(copy, op)
        if (rank == root) tensor.copyFrom(copy)
        return tensor
    }

    override suspend fun allGatherInto(output: Tensor, input: Tensor, dim: Int): Tensor {
        val all = exchange("allGather", input.copy())
        Tensor.concatInto(all.map { it as Tensor }, output, dim)
        return output
    }

    override suspend fun reduceScatterInto(output: Tensor, input: Tensor, op: ReduceOp, dim: Int): Tensor {
        val copy = input.copy()
        allReduce(copy, op)
        output.copyFrom(copy.chunk(worldSize, dim)[rank])
        return output
    }

    override suspend fun gather(input: Tensor, root: Int, dim: Int): Tensor? {
        val all = exchange("gather($root)", input.copy())
        return if (rank == root) Tensor.concat(all.map { it as Tensor }, dim) else null
    }

    override suspend fun scatter(output: Tensor, input: Tensor?, root: Int, dim: Int) {
        val all = exchange("scatter($root)", if (rank == root) input!!.copy() else null)
        output.copyFrom((all[root] as Tensor).chunk(worldSize, dim)[rank])
    }

    override suspend fun allToAll(input: Tensor, dim: Int): Tensor {
        val all = exchange("allToAll", input.copy())
        return Tensor.concat(all.map { (it as Tensor).chunk(worldSize, dim)[rank] }, dim)
    }

    override suspend fun allGatherVInto(output: Tensor, input: Tensor, sizes: List<Int>): Tensor =
        throw UnsupportedOperationException("fake world: no uneven collectives")

    override suspend fun reduceScatterVInto(output: Tensor, input: Tensor, sizes: List<Int>, op: ReduceOp): Tensor =
        throw UnsupportedOperationException("fake world: no uneven collectives")

    override suspend fun allToAllVInto(output: Tensor, input: Tensor, inputSplits: List<Int>, outputSplits: List<Int>): Tensor =
        throw UnsupportedOperationException("fake world: no uneven collectives")

    override suspend fun barrier() {
        exchange("barrier", null)
    }

    override suspend fun send(tensor: Tensor, dst: Int, tag: Int): Unit = throw UnsupportedOperationException("fake world: no point-to-point")
    override suspend fun recv(tensor: Tensor, src: Int, tag: Int): MessageInfo = throw UnsupportedOperationException("fake world: no point-to-point")
    override suspend fun probe(src: Int, tag: Int): MessageInfo = throw UnsupportedOperationException("fake world: no point-to-point")

    /** Shared between the ranks of one split: the new groups, filled by the last arriver. */
    private class SplitResult(val groups: Map<Int, Pair<FakeWorld.Group, List<Int>>>)

    override suspend fun split(color: Int?, key: Int): Communicator? {
        val (seq, all) = exchangeWithSeq("split", Triple(color, key, rank))
        // Every rank computes the same grouping; the group objects must be shared, so build them once per slot.
        val result = synchronized(splitCache) {
            splitCache.getOrPut(seq to all) {
                val members = all.map { @Suppress("UNCHECKED_CAST") (it as Triple<Int?, Int, Int>) }
                    .filter { it.first != null }
                    .groupBy { it.first!! }
                    .mapValues { (_, v) -> v.sortedWith(compareBy({ it.second }, { it.third })).map { it.third } }
                SplitResult(members.mapValues { (_, ranks) -> FakeWorld.Group(ranks.size) to ranks })
            }
        }
        val c = color ?: return null
        val (g, ranks) = result.groups.getValue(c)
        return FakeComm(g, ranks.indexOf(rank)).also { splits += it }
    }

    private val splitCache: MutableMap<Pair<Long, List<Any?>>, SplitResult> get() = sharedSplitCache.getOrPut(group) { HashMap() }

    val splits: MutableList<FakeComm> = Collections.synchronizedList(ArrayList())

    @Volatile var closed = false
        private set

    override fun abort(reason: String): Boolean {
        if (group.abortCause != null) return false
        group.abort(CommunicatorAbortedException(reason, rank, "fake", "abort", -1))
        return true
    }

    override val isAborted: Boolean get() = group.abortCause != null

    override fun close() {
        closed = true
        group.abort(CommunicatorAbortedException("closed", rank, "fake", "close", -1))
    }

    private companion object {
        val sharedSplitCache: MutableMap<FakeWorld.Group, MutableMap<Pair<Long, List<Any?>>, SplitResult>> =
            Collections.synchronizedMap(java.util.IdentityHashMap())
    }
}
