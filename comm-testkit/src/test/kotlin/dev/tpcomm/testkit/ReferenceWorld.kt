package dev.tpcomm.testkit

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.Communicator
import dev.tpcomm.Device
import dev.tpcomm.MessageInfo
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.spi.CollectiveValidator
import dev.tpcomm.spi.CommunicationErrors
import dev.tpcomm.spi.MonitoredBarrier
import dev.tpcomm.spi.MonitoredBarrierChannel
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.TimeoutCancellationException
import kotlinx.coroutines.CompletableDeferred
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.flow.MutableStateFlow
import kotlinx.coroutines.flow.first
import kotlinx.coroutines.flow.update
import kotlinx.coroutines.supervisorScope
import kotlinx.coroutines.withTimeoutOrNull
import kotlinx.serialization.KSerializer
import kotlinx.serialization.json.Json
import java.lang.foreign.MemorySegment
import java.util.concurrent.atomic.AtomicLong

/**
 * A deliberately simple in-process backend, used only to check the conformance suite itself:
 * that every case can pass on a correct backend, and (with [FaultyCommunicator]) that the suite
 * catches wrong results. Every collective is matched by sequence number in one lock; the last rank
 * to arrive computes every rank's result with [ReferenceReduction]. Not a product backend: no
 * overlap, no performance, no flight recorder.
 */
internal class ReferenceWorld(val size: Int, private val config: CommConfig) {
    private val lock = Any()
    private val slots = HashMap<Long, Slot>()
    private var abortCause: Throwable? = null
    private var mismatch: Pair<Long, CollectiveMismatchException>? = null
    private val mailboxes = List(size) { ArrayList<Message>() }
    // Bumped atomically (update, never value++): two senders racing a plain read-modify-write could
    // put the version back to one a waiting receiver already saw, and it would sleep past its message.
    private val mailVersion = MutableStateFlow(0L)
    val communicators: List<ReferenceCommunicator> = List(size) { ReferenceCommunicator(this, it) }

    private class Message(val src: Int, val tag: Int, val bytes: ByteArray)

    class Call(
        val rank: Int,
        val seq: Long,
        val operation: String,
        val signature: Map<String, Any?>,
        val args: List<Any?>,
        val result: CompletableDeferred<Any?> = CompletableDeferred(),
    )

    private class Slot(val calls: Array<Call?>) { var count = 0 }

    private fun aborted(rank: Int, operation: String, seq: Long, cause: Throwable?) =
        CommunicatorAbortedException("the communicator was aborted: ${cause?.message ?: "closed"}", rank, BACKEND, operation, seq, cause)

    /** Throws what a call on the aborted (or closed) world throws; returns while it is usable. */
    fun ensureUsable(rank: Int, operation: String) {
        synchronized(lock) { abortCause }?.let { throw aborted(rank, operation, -1, it) }
    }

    /** Whether the world was aborted (or closed). */
    val isAborted: Boolean get() = synchronized(lock) { abortCause != null }

    /** Aborts the world with [cause] unless it was aborted before; returns whether this call did. */
    fun abort(cause: Throwable): Boolean {
        val pending = ArrayList<Call>()
        synchronized(lock) {
            if (abortCause != null) return false
            abortCause = cause
            for (s in slots.values) s.calls.filterNotNullTo(pending)
            slots.clear()
        }
        for (c in pending) c.result.completeExceptionally(aborted(c.rank, c.operation, c.seq, cause))
        mailVersion.update { it + 1 }
        return true
    }

    /** Registers [call] at [seq] (synchronously), then awaits its result under the timeout. */
    suspend fun collective(seq: Long, call: Call): Any? {
        var ready: List<Call>? = null
        synchronized(lock) {
            mismatch?.let { (s, e) ->
                if (s == seq) throw CollectiveMismatchException(e.reason, call.rank, BACKEND, call.operation, seq, e.ranks, e.fields, dump(call.rank, seq, call.operation))
            }
            abortCause?.let { throw aborted(call.rank, call.operation, seq, it) }
            val slot = slots.getOrPut(seq) { Slot(arrayOfNulls(size)) }
            val first = slot.calls.firstOrNull { it != null }
            if (first != null) {
                val fields = if (first.operation != call.operation) listOf("operation")
                else (first.signature.keys + call.signature.keys).filter { first.signature[it] != call.signature[it] }
                if (fields.isNotEmpty()) {
                    val message = "rank ${call.rank} called ${call.operation}${call.signature} but rank ${first.rank} called ${first.operation}${first.signature}"
                    val e = CollectiveMismatchException(message, call.rank, BACKEND, call.operation, seq, listOf(call.rank), fields, dump(call.rank, seq, call.operation))
                    mismatch = seq to e
                    val others = slot.calls.filterNotNull()
                    slots.remove(seq)
                    abortCause = e
                    val pending = slots.values.flatMap { it.calls.filterNotNull() }
                    slots.clear()
                    for (c in others) c.result.completeExceptionally(CollectiveMismatchException(message, c.rank, BACKEND, c.operation, seq, listOf(call.rank), fields, dump(c.rank, seq, c.operation)))
                    for (c in pending) c.result.completeExceptionally(aborted(c.rank, c.operation, c.seq, e))
                    mailVersion.update { it + 1 }
                    throw e
                }
            }
            slot.calls[call.rank] = call
            if (++slot.count == size) {
                slots.remove(seq)
                ready = slot.calls.map { it!! }
            }
        }
        ready?.let { calls ->
            val results = try {
                perform(calls)
            } catch (m: SplitsMismatch) {
                // allToAllV: what a rank expects from a peer is not what the peer sends; every rank fails alike.
                val message = "allToAllV: the outputSplits of ranks ${m.ranks} disagree with what their peers send"
                val errors = calls.map { c -> CollectiveMismatchException(message, c.rank, BACKEND, c.operation, seq, m.ranks, listOf("sizes"), dump(c.rank, seq, c.operation)) }
                synchronized(lock) { mismatch = seq to errors[0] }
                abort(errors[0])
                calls.forEachIndexed { i, c -> c.result.completeExceptionally(errors[i]) }
                null
            } catch (e: Throwable) { abort(e); throw e }
            if (results == null) return call.result.await()
            calls.forEachIndexed { i, c -> c.result.complete(results[i]) }
        }
        val value = try {
            withTimeoutOrNull(config.timeout) { call.result.await() }
        } catch (e: CancellationException) {
            if (!call.result.isCompleted) {
                // A caller's own deadline (withTimeout) is a named timeout that aborts the world (docs/failures.md).
                if (e is TimeoutCancellationException) {
                    val t = CommunicationTimeoutException(
                        "${call.operation} did not complete before the caller's deadline (${e.message})", call.rank, BACKEND, call.operation, seq, e,
                        dump(call.rank, seq, call.operation),
                    )
                    abort(t)
                    throw t
                }
                abort(e)
            }
            throw e
        }
        if (value == null && !call.result.isCompleted) {
            val e = CommunicationTimeoutException("no match within ${config.timeout}", call.rank, BACKEND, call.operation, seq, null, dump(call.rank, seq, call.operation))
            abort(e)
            throw e
        }
        return call.result.await()
    }

    /** This world keeps no history: its "dump" describes only the failing call. */
    private fun dump(rank: Int, seq: Long, operation: String) =
        "{\"backend\":\"$BACKEND\",\"rank\":$rank,\"entries\":[{\"sequence\":$seq,\"operation\":\"$operation\"}]}"

    private class SplitsMismatch(val ranks: List<Int>) : RuntimeException()

    private fun perform(calls: List<Call>): List<Any?> {
        val n = size
        @Suppress("UNCHECKED_CAST")
        fun <T> arg(r: Int, i: Int) = calls[r].args[i] as T
        return when (calls[0].operation) {
            "allReduce" -> {
                val expected = ReferenceReduction.expected(List(n) { arg<ReduceOp>(it, 1) }, List(n) { arg<Tensor>(it, 0).copy() })
                List(n) { arg<Tensor>(it, 0).copyFrom(expected) }
            }
            "broadcast" -> {
                val root = arg<Int>(0, 1)
                val data = arg<Tensor>(root, 0).copy()
                List(n) { arg<Tensor>(it, 0).copyFrom(data) }
            }
            "reduce" -> {
                val root = arg<Int>(0, 1)
                val expected = ReferenceReduction.expected(List(n) { arg<ReduceOp>(it, 2) }, List(n) { arg<Tensor>(it, 0).copy() })
                arg<Tensor>(root, 0).copyFrom(expected)
                List(n) { arg<Tensor>(it, 0) }
            }
            "allGather" -> {
                val all = Tensor.concat(List(n) { arg<Tensor>(it, 1) }, arg(0, 2))
                List(n) { arg<Tensor>(it, 0).copyFrom(all) }
            }
            "reduceScatter" -> {
                val expected = ReferenceReduction.expected(List(n) { arg<ReduceOp>(it, 2) }, List(n) { arg<Tensor>(it, 1).copy() })
                val chunks = expected.chunk(n, arg(0, 3))
                List(n) { arg<Tensor>(it, 0).copyFrom(chunks[it]) }
            }
            "gather" -> {
                val root = arg<Int>(0, 1)
                val all = Tensor.concat(List(n) { arg<Tensor>(it, 0) }, arg(0, 2))
                List(n) { if (it == root) all else null }
            }
            "scatter" -> {
                val root = arg<Int>(0, 2)
                val chunks = arg<Tensor>(root, 1).chunk(n, arg(0, 3))
                List(n) { arg<Tensor>(it, 0).copyFrom(chunks[it]); Unit }
            }
            "allToAll" -> {
                val dim = arg<Int>(0, 1)
                val chunks = List(n) { arg<Tensor>(it, 0).chunk(n, dim) }
                List(n) { r -> Tensor.concat(List(n) { i -> chunks[i][r] }, dim) }
            }
            "allGatherV" -> {
                val out = List(n) { arg<Tensor>(it, 0) }
                var at = 0L
                for (j in 0 until n) {
                    val src = arg<Tensor>(j, 1)
                    for (r in 0 until n) MemorySegment.copy(src.segment, 0L, out[r].segment, at, src.byteSize)
                    at += src.byteSize
                }
                out
            }
            "reduceScatterV" -> {
                val expected = ReferenceReduction.expected(List(n) { arg<ReduceOp>(it, 2) }, List(n) { arg<Tensor>(it, 1).copy() })
                val sizes = arg<List<Int>>(0, 3)
                val rowBytes = expected.stride(0) * expected.dtype.byteSize
                List(n) { r ->
                    val out = arg<Tensor>(r, 0)
                    MemorySegment.copy(expected.segment, sizes.take(r).sum() * rowBytes, out.segment, 0L, out.byteSize)
                    out
                }
            }
            "allToAllV" -> {
                val rowBytes = arg<Tensor>(0, 1).stride(0) * arg<Tensor>(0, 1).dtype.byteSize
                val bad = (0 until n).filter { r -> (0 until n).any { j -> arg<List<Int>>(j, 2)[r] != arg<List<Int>>(r, 3)[j] } }
                if (bad.isNotEmpty()) throw SplitsMismatch(bad)
                List(n) { r ->
                    val out = arg<Tensor>(r, 0)
                    var at = 0L
                    for (j in 0 until n) {
                        val splits = arg<List<Int>>(j, 2)
                        val len = splits[r] * rowBytes
                        MemorySegment.copy(arg<Tensor>(j, 1).segment, splits.take(r).sum() * rowBytes, out.segment, at, len)
                        at += len
                    }
                    out
                }
            }
            "barrier" -> List(n) { Unit }
            // The object collectives are one collective here: each rank passes its JSON (a root null when its argument was wrong).
            "allGatherObject" -> List(n) { List(n) { r -> arg<String>(r, 0) } }
            "broadcastObject" -> { val root = arg<Int>(0, 1); List(n) { arg<String?>(root, 0) } }
            "gatherObject" -> { val root = arg<Int>(0, 1); List(n) { r -> if (r == root) List(n) { arg<String>(it, 0) } else null } }
            "scatterObject" -> { val root = arg<Int>(0, 1); val rows = arg<List<String>?>(root, 0); List(n) { r -> rows?.get(r) } }
            "split" -> {
                val out = arrayOfNulls<Communicator>(n)
                val byColor = (0 until n).filter { arg<Int?>(it, 0) != null }.groupBy { arg<Int>(it, 0) }
                for ((_, members) in byColor) {
                    val ordered = members.sortedWith(compareBy({ arg<Int>(it, 1) }, { it }))
                    val sub = ReferenceWorld(ordered.size, config.copy(worldSize = ordered.size, rank = 0, localRank = 0))
                    ordered.forEachIndexed { i, r -> out[r] = sub.communicators[i] }
                }
                out.toList()
            }
            else -> error("unknown operation ${calls[0].operation}")
        }
    }

    fun send(from: Int, seq: Long, tensor: Tensor, dst: Int, tag: Int) {
        val bytes = tensor.segment.toArray(java.lang.foreign.ValueLayout.JAVA_BYTE)
        synchronized(lock) {
            abortCause?.let { throw aborted(from, "send", seq, it) }
            mailboxes[dst] += Message(from, tag, bytes)
        }
        mailVersion.update { it + 1 }
    }

    suspend fun receive(me: Int, seq: Long, src: Int, tag: Int, into: Tensor?, operation: String): MessageInfo {
        val found = withTimeoutOrNull(config.timeout) {
            while (true) {
                val seen = mailVersion.value
                synchronized(lock) {
                    abortCause?.let { throw aborted(me, operation, seq, it) }
                    val box = mailboxes[me]
                    val i = box.indexOfFirst { (src == Communicator.ANY_SOURCE || it.src == src) && (if (tag == Communicator.ANY_TAG) it.tag >= 0 else it.tag == tag) }
                    if (i >= 0) {
                        val m = box[i]
                        if (into != null) {
                            // As every backend: a CommunicationException on the receiver, the message left queued.
                            if (into.byteSize != m.bytes.size.toLong()) {
                                throw dev.tpcomm.CommunicationException(
                                    "the message from rank ${m.src} (tag ${m.tag}) has ${m.bytes.size} bytes but the receiving tensor has ${into.byteSize} bytes",
                                    me, BACKEND, operation, seq,
                                )
                            }
                            box.removeAt(i)
                            MemorySegment.copy(MemorySegment.ofArray(m.bytes), 0, into.segment, 0, m.bytes.size.toLong())
                        }
                        return@withTimeoutOrNull MessageInfo(m.src, m.tag, m.bytes.size.toLong())
                    }
                }
                mailVersion.first { it != seen }
            }
            @Suppress("UNREACHABLE_CODE") null
        }
        if (found == null) {
            val e = CommunicationTimeoutException("no message from $src with tag $tag within ${config.timeout}", me, BACKEND, operation, seq)
            abort(e)
            throw e
        }
        return found
    }

    companion object {
        const val BACKEND = "reference"

        /** Runs [block] on every rank concurrently; a rank's exception aborts the world and is rethrown once all ranks ended. */
        suspend fun <R> run(worldSize: Int, config: CommConfig, block: suspend (Communicator) -> R): List<R> {
            val world = ReferenceWorld(worldSize, config)
            return supervisorScope {
                val jobs = world.communicators.map { c ->
                    async(Dispatchers.Default) {
                        try { block(c) } catch (e: Throwable) { world.abort(e); throw e }
                    }
                }
                val results = jobs.map { runCatching { it.await() } }
                results.firstOrNull { it.isFailure }?.exceptionOrNull()?.let { throw it }
                results.map { it.getOrThrow() }
            }
        }

        val launcher: WorldLauncher = object : WorldLauncher {
            override suspend fun <R> run(worldSize: Int, config: CommConfig, block: suspend (Communicator) -> R): List<R> =
                ReferenceWorld.run(worldSize, config, block)
        }
    }
}

/** One rank of a [ReferenceWorld]. */
internal class ReferenceCommunicator(private val world: ReferenceWorld, override val rank: Int) : Communicator {
    override val worldSize: Int get() = world.size
    override val backendName: String get() = ReferenceWorld.BACKEND
    override val device: Device get() = Device.Host
    private val sequence = AtomicLong()
    private val collectiveSequence = AtomicLong()
    @Volatile private var closed = false

    /** Sequence number of any operation (p2p included), for messages. */
    private fun next(operation: String): Long {
        val seq = sequence.incrementAndGet()
        if (closed) throw CommunicatorAbortedException("the communicator was closed", rank, ReferenceWorld.BACKEND, operation, seq)
        return seq
    }

    /** The core's one validator, as every backend runs it. */
    private val validator = CollectiveValidator(worldSize, Device.Host, nativeMemory = false)

    private suspend fun call(operation: String, signature: Map<String, Any?>, vararg args: Any?): Any? {
        next(operation)
        // Collectives are matched by their own count: point-to-point calls in between do not shift them.
        val seq = collectiveSequence.incrementAndGet()
        return world.collective(seq, ReferenceWorld.Call(rank, seq, operation, signature, args.toList()))
    }

    private fun sig(t: Tensor, vararg extra: Pair<String, Any?>) = mapOf("dtype" to t.dtype, "shape" to t.shape) + extra

    override suspend fun allReduce(tensor: Tensor, op: ReduceOp): Tensor {
        validator.allReduce(tensor, op)
        call("allReduce", sig(tensor, "op" to op.name), tensor, op)
        return tensor
    }

    override suspend fun broadcast(tensor: Tensor, root: Int): Tensor {
        validator.broadcast(tensor, root)
        call("broadcast", sig(tensor, "root" to root), tensor, root)
        return tensor
    }

    override suspend fun reduce(tensor: Tensor, root: Int, op: ReduceOp): Tensor {
        validator.reduce(tensor, root, op)
        call("reduce", sig(tensor, "root" to root, "op" to op.name), tensor, root, op)
        return tensor
    }

    override suspend fun allGatherInto(output: Tensor, input: Tensor, dim: Int): Tensor {
        validator.allGatherInto(output, input, dim)
        call("allGather", sig(input, "dim" to dim), output, input, dim)
        return output
    }

    override suspend fun reduceScatterInto(output: Tensor, input: Tensor, op: ReduceOp, dim: Int): Tensor {
        validator.reduceScatterInto(output, input, op, dim)
        call("reduceScatter", sig(input, "op" to op.name, "dim" to dim), output, input, op, dim)
        return output
    }

    override suspend fun gather(input: Tensor, root: Int, dim: Int): Tensor? {
        validator.gather(input, root, dim)
        return call("gather", sig(input, "root" to root, "dim" to dim), input, root, dim) as Tensor?
    }

    override suspend fun scatter(output: Tensor, input: Tensor?, root: Int, dim: Int) {
        validator.scatter(output, input, root, rank, dim)
        call("scatter", sig(output, "root" to root, "dim" to dim), output, input, root, dim)
    }

    override suspend fun allToAll(input: Tensor, dim: Int): Tensor {
        validator.allToAll(input, dim)
        return call("allToAll", sig(input, "dim" to dim), input, dim) as Tensor
    }

    override suspend fun allGatherVInto(output: Tensor, input: Tensor, sizes: List<Int>): Tensor {
        validator.allGatherVInto(output, input, sizes, rank)
        call("allGatherV", mapOf("dtype" to input.dtype, "shape" to output.shape, "sizes" to sizes), output, input)
        return output
    }

    override suspend fun reduceScatterVInto(output: Tensor, input: Tensor, sizes: List<Int>, op: ReduceOp): Tensor {
        validator.reduceScatterVInto(output, input, sizes, op, rank)
        call("reduceScatterV", sig(input, "op" to op.name, "sizes" to sizes), output, input, op, sizes)
        return output
    }

    override suspend fun allToAllVInto(output: Tensor, input: Tensor, inputSplits: List<Int>, outputSplits: List<Int>): Tensor {
        validator.allToAllVInto(output, input, inputSplits, outputSplits)
        call("allToAllV", mapOf("dtype" to input.dtype, "row" to input.shape.drop(1)), output, input, inputSplits, outputSplits)
        return output
    }

    override suspend fun barrier() {
        call("barrier", emptyMap())
    }

    override suspend fun send(tensor: Tensor, dst: Int, tag: Int) {
        validator.send(tensor, dst, tag)
        world.send(rank, next("send"), tensor, dst, tag)
    }

    override suspend fun recv(tensor: Tensor, src: Int, tag: Int): MessageInfo {
        validator.recv(tensor, src, tag)
        return world.receive(rank, next("recv"), src, tag, tensor, "recv")
    }

    override suspend fun probe(src: Int, tag: Int): MessageInfo {
        validator.probe(src, tag)
        return world.receive(rank, next("probe"), src, tag, null, "probe")
    }

    override suspend fun split(color: Int?, key: Int): Communicator? {
        validator.split(color)
        return call("split", emptyMap(), color, key) as Communicator?
    }

    // The object collectives, each one collective of this world (so issued atomically, in call order).

    private val json = Json { encodeDefaults = true }

    private fun rootFailed(operation: String, root: Int): Nothing = throw dev.tpcomm.CommunicationException(
        "the root rank $root passed a wrong argument to $operation; no value was exchanged", rank, ReferenceWorld.BACKEND, operation, collectiveSequence.get(),
    )

    override suspend fun <T> allGatherObject(value: T, serializer: KSerializer<T>): List<T> {
        @Suppress("UNCHECKED_CAST")
        val all = call("allGatherObject", emptyMap(), json.encodeToString(serializer, value)) as List<String>
        return all.map { json.decodeFromString(serializer, it) }
    }

    override suspend fun <T> broadcastObject(value: T?, root: Int, serializer: KSerializer<T>): T {
        dev.tpcomm.spi.CollectiveChecks.root(root, worldSize, "broadcastObject")
        val mine = if (rank == root && value != null) json.encodeToString(serializer, value) else null
        val got = call("broadcastObject", mapOf("root" to root), mine, root) as String?
        if (rank == root) requireNotNull(value) { "broadcastObject: the root (rank $root) must pass a value, got null" }
        return json.decodeFromString(serializer, got ?: rootFailed("broadcastObject", root))
    }

    override suspend fun <T> gatherObject(value: T, root: Int, serializer: KSerializer<T>): List<T>? {
        dev.tpcomm.spi.CollectiveChecks.root(root, worldSize, "gatherObject")
        @Suppress("UNCHECKED_CAST")
        val all = call("gatherObject", mapOf("root" to root), json.encodeToString(serializer, value), root) as List<String>?
        return all?.map { json.decodeFromString(serializer, it) }
    }

    override suspend fun <T> scatterObject(values: List<T>?, root: Int, serializer: KSerializer<T>): T {
        dev.tpcomm.spi.CollectiveChecks.root(root, worldSize, "scatterObject")
        val rows = if (rank == root && values != null && values.size == worldSize) values.map { json.encodeToString(serializer, it) } else null
        val mine = call("scatterObject", mapOf("root" to root), rows, root) as String?
        if (rank == root) {
            require(values != null && values.size == worldSize) { "scatterObject: the root (rank $root) must pass one value per rank ($worldSize), got ${values?.size}" }
        }
        return json.decodeFromString(serializer, mine ?: rootFailed("scatterObject", root))
    }

    /** The core's protocol over this world's mailboxes, on tag -2, which `ANY_TAG` never matches. */
    override suspend fun monitoredBarrier(timeout: kotlin.time.Duration, waitAllRanks: Boolean) {
        MonitoredBarrier.run(this, control, timeout, waitAllRanks)
    }

    private val control = object : MonitoredBarrierChannel {
        override val errors = CommunicationErrors(rank, ReferenceWorld.BACKEND)
        override val concurrentReceives: Boolean get() = true

        override suspend fun send(value: Long, dst: Int) {
            world.send(rank, next(MonitoredBarrier.OPERATION), Tensor.of(longArrayOf(value)), dst, CONTROL_TAG)
        }

        override suspend fun recv(src: Int): Long {
            val t = Tensor.zeros(dev.tpcomm.DType.Int64, 1)
            world.receive(rank, next(MonitoredBarrier.OPERATION), src, CONTROL_TAG, t, MonitoredBarrier.OPERATION)
            return t.getLong(0)
        }

        override fun ensureUsable() {
            world.ensureUsable(rank, MonitoredBarrier.OPERATION)
        }

        override fun abort(cause: dev.tpcomm.CommunicationException) {
            world.abort(cause)
        }
    }

    private companion object {
        const val CONTROL_TAG = -2
    }

    override fun abort(reason: String): Boolean =
        world.abort(CommunicatorAbortedException("rank $rank aborted the communicator: $reason", rank, ReferenceWorld.BACKEND, "abort", -1))

    override val isAborted: Boolean get() = world.isAborted

    override fun close() {
        if (closed) return
        closed = true
        world.abort(CommunicatorAbortedException("rank $rank closed the communicator", rank, ReferenceWorld.BACKEND, "close", -1))
    }
}
