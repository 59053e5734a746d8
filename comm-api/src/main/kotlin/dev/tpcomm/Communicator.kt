package dev.tpcomm

import dev.tpcomm.spi.CollectiveShapes
import dev.tpcomm.spi.MonitoredBarrier
import dev.tpcomm.spi.ObjectProtocol
import kotlinx.serialization.KSerializer
import kotlin.time.Duration

/**
 * A group of ranks that run collectives together: tpcomm's central interface.
 *
 * **Program order.** Every rank must call the same collectives in the same order with matching
 * arguments (dtype, shape, op, root). A call is enqueued synchronously, before the function first
 * suspends, so `async(start = CoroutineStart.UNDISPATCHED) { comm.allReduce(x) }` issues the
 * collective at once and overlaps it with the code that follows while keeping issue order equal to
 * call order on every rank.
 *
 * **Thread-safety.** Calls may come from any thread or coroutine; their issue order is the order in
 * which the calls were made, and ranks pair their collectives by that order. Calls made
 * concurrently from several threads of one rank are issued in whatever order those threads reach
 * the communicator, which the peers cannot know: same-shape calls may then pair with another
 * thread's call on a peer, silently. Give each rank one order (one thread or coroutine per
 * communicator, or an explicit order every rank follows); an object collective or a monitored
 * barrier is one call in that order. Do not modify a tensor while a collective on it is in flight.
 *
 * **Failure.** Every call has a deadline ([CommConfig.timeout]; an enclosing `withTimeout` also
 * applies). Bad arguments detectable on one rank throw [IllegalArgumentException] before any data
 * moves, with buffers unchanged, and leave the communicator usable. A rank that never arrives,
 * an exception or a cancellation during an in-flight collective, or a mismatch across ranks
 * aborts the communicator: that call and every pending and later call on every rank fail with a
 * [CommunicationException] (subclasses [CommunicationTimeoutException],
 * [CollectiveMismatchException], [CommunicatorAbortedException]) naming rank, backend, operation
 * and sequence number, with the flight recorder's dump attached. Memory native code may still touch
 * is never freed early.
 *
 * **Cancellation.** Cancelling a coroutine suspended in a collective aborts the communicator (the
 * other ranks cannot finish that collective without it) and the cancelled call throws
 * `CancellationException`.
 *
 * [close] releases the communicator's resources; later calls throw [CommunicatorAbortedException].
 */
public interface Communicator : AutoCloseable {
    /** This process's (or coroutine's) rank in `0 until worldSize`. */
    public val rank: Int

    /** Number of ranks. */
    public val worldSize: Int

    /** Name of the backend: `local`, `mpi`, `nccl`, `rccl`, ... */
    public val backendName: String

    /** The device whose tensors this communicator moves ([Device.Host] for CPU backends). */
    public val device: Device

    /**
     * Reduces [tensor] element-wise across all ranks with [op], in place: on return every rank's
     * [tensor] holds the result. Returns [tensor].
     */
    public suspend fun allReduce(tensor: Tensor, op: ReduceOp = ReduceOp.Sum): Tensor

    /** Copies [root]'s [tensor] into every other rank's [tensor], in place. Returns [tensor]. */
    public suspend fun broadcast(tensor: Tensor, root: Int): Tensor

    /**
     * Reduces [tensor] across ranks with [op] into [root]'s [tensor], in place. Other ranks'
     * tensors are left unchanged. Returns [tensor].
     */
    public suspend fun reduce(tensor: Tensor, root: Int, op: ReduceOp = ReduceOp.Sum): Tensor

    /** A new tensor holding every rank's [input] concatenated in rank order along [dim]. */
    public suspend fun allGather(input: Tensor, dim: Int = 0): Tensor {
        val output = Tensor.zeros(input.dtype, CollectiveShapes.allGather(input, worldSize, dim))
        return allGatherInto(output, input, dim)
    }

    /**
     * Writes every rank's [input] concatenated in rank order along [dim] into [output], whose
     * size along [dim] must be `worldSize` times [input]'s. Allocates nothing on the hot path.
     * Returns [output].
     */
    public suspend fun allGatherInto(output: Tensor, input: Tensor, dim: Int = 0): Tensor

    /**
     * Reduces [input] across ranks with [op] and returns this rank's chunk of the result: [input]
     * split into `worldSize` equal chunks along [dim], chunk `rank`. The size along [dim] must be
     * divisible by `worldSize`.
     */
    public suspend fun reduceScatter(input: Tensor, op: ReduceOp = ReduceOp.Sum, dim: Int = 0): Tensor {
        val output = Tensor.zeros(input.dtype, CollectiveShapes.reduceScatter(input, worldSize, dim))
        return reduceScatterInto(output, input, op, dim)
    }

    /** [reduceScatter] writing into [output] (this rank's chunk shape). Returns [output]. */
    public suspend fun reduceScatterInto(output: Tensor, input: Tensor, op: ReduceOp = ReduceOp.Sum, dim: Int = 0): Tensor

    /**
     * Gathers every rank's [input] on [root], concatenated in rank order along [dim].
     * Returns the new tensor on [root] and null on the other ranks.
     */
    public suspend fun gather(input: Tensor, root: Int, dim: Int = 0): Tensor?

    /**
     * Splits [root]'s [input] into `worldSize` equal chunks along [dim] and writes chunk `i` into
     * rank `i`'s [output]. [input] is read on [root] only and may be null elsewhere.
     */
    public suspend fun scatter(output: Tensor, input: Tensor?, root: Int, dim: Int = 0)

    /**
     * Splits [input] into `worldSize` chunks along [dim], sends chunk `j` to rank `j`, and returns
     * a new tensor of [input]'s shape whose chunk `i` came from rank `i`.
     */
    public suspend fun allToAll(input: Tensor, dim: Int = 0): Tensor

    /**
     * All-gather with a different number of rows per rank (torchcomms' `all_gather_v`): a new tensor
     * holding every rank's [input] concatenated in rank order along dim 0. [sizes] has one entry per
     * rank, the number of rows (slices along dim 0) that rank contributes; `sizes[rank]` must be
     * [input]'s dim 0, the other dimensions must agree across ranks, and every rank passes the same
     * [sizes] (checked with the collective signature: different lists fail with
     * [CollectiveMismatchException] on every rank before data moves). A rank may contribute 0 rows.
     * The result has `sizes.sum()` rows.
     */
    public suspend fun allGatherV(input: Tensor, sizes: List<Int>): Tensor {
        val shape = dev.tpcomm.spi.CollectiveValidator(worldSize, device, nativeMemory = false).allGatherVShape(input, sizes, rank)
        val output = Tensor.zeros(input.dtype, shape)
        return allGatherVInto(output, input, sizes)
    }

    /**
     * [allGatherV] writing into [output], whose dim 0 must be `sizes.sum()` and whose other
     * dimensions are [input]'s. Allocates nothing on the hot path. Returns [output].
     */
    public suspend fun allGatherVInto(output: Tensor, input: Tensor, sizes: List<Int>): Tensor

    /**
     * Reduce-scatter with a different number of rows per rank (torchcomms' `reduce_scatter_v`):
     * reduces [input] across ranks with [op] and returns this rank's rows of the result, rows
     * `sizes[0] + ... + sizes[rank - 1]` until that plus `sizes[rank]`, along dim 0. [input] has
     * `sizes.sum()` rows on every rank; every rank passes the same [sizes] (checked with the
     * collective signature). A rank may receive 0 rows.
     */
    public suspend fun reduceScatterV(input: Tensor, sizes: List<Int>, op: ReduceOp = ReduceOp.Sum): Tensor {
        val shape = dev.tpcomm.spi.CollectiveValidator(worldSize, device, nativeMemory = false).reduceScatterVShape(input, sizes, op, rank)
        val output = Tensor.zeros(input.dtype, shape)
        return reduceScatterVInto(output, input, sizes, op)
    }

    /** [reduceScatterV] writing into [output] (`sizes[rank]` rows, [input]'s other dimensions). Returns [output]. */
    public suspend fun reduceScatterVInto(output: Tensor, input: Tensor, sizes: List<Int>, op: ReduceOp = ReduceOp.Sum): Tensor

    /**
     * All-to-all with a different number of rows per pair of ranks (torchcomms' `all_to_all_v`,
     * PyTorch's `all_to_all_single` with split sizes): [input]'s first `inputSplits[0]` rows go to
     * rank 0, the next `inputSplits[1]` to rank 1, and so on; the result holds, in rank order, the
     * `outputSplits[j]` rows received from each rank `j`. Splits count rows along dim 0, one entry
     * per rank; `inputSplits` must add up to [input]'s dim 0, and the other dimensions agree across
     * ranks. What rank `i` sends to `j` (its `inputSplits[j]`) must be what `j` expects from `i`
     * (its `outputSplits[i]`): a disagreement fails with [CollectiveMismatchException] on every
     * rank before any row moves (where the backend checks consistency: by default on local and
     * MPI). The mixture-of-experts token exchange is the typical use (docs/collectives.md, "Uneven collectives").
     */
    public suspend fun allToAllV(input: Tensor, inputSplits: List<Int>, outputSplits: List<Int>): Tensor {
        val shape = dev.tpcomm.spi.CollectiveValidator(worldSize, device, nativeMemory = false).allToAllVShape(input, inputSplits, outputSplits)
        val output = Tensor.zeros(input.dtype, shape)
        return allToAllVInto(output, input, inputSplits, outputSplits)
    }

    /** [allToAllV] writing into [output] (`outputSplits.sum()` rows, [input]'s other dimensions). Returns [output]. */
    public suspend fun allToAllVInto(output: Tensor, input: Tensor, inputSplits: List<Int>, outputSplits: List<Int>): Tensor

    /** Returns once every rank has called it. */
    public suspend fun barrier()

    /**
     * A barrier that names the ranks that did not reach it within [timeout] (PyTorch's
     * `monitored_barrier`): rank 0 waits up to [timeout] for every other rank; when all arrived, every
     * rank returns. Otherwise rank 0 throws [MonitoredBarrierException] whose `missingRanks` (and
     * message: `rank 2 did not reach monitoredBarrier within 2s`) names the first missing rank, or,
     * with [waitAllRanks], all of them; it tells the ranks that arrived, which throw the same
     * exception with the same list. Ranks are numbered in this communicator (a sub-communicator's own
     * numbering). A host-side debugging aid, not a fast barrier: `2 (worldSize - 1)` small messages
     * through rank 0.
     *
     * **Deadlines.** Rank 0 ends within [timeout] plus a few messages. The other ranks wait up to
     * twice [timeout] for rank 0's answer (rank 0 may call late by up to one timeout); with no answer
     * they throw [MonitoredBarrierException] naming rank 0. [CommConfig.timeout] still bounds every
     * message, so keep [timeout] below half of it. On the GPU backends rank 0 receives from one rank at
     * a time in rank order (a receive holds the device's thread), so it names only the first missing
     * rank (and says which were not checked), and cannot tell the others, which then fail with their
     * own deadline or NCCL's error.
     *
     * **Failure.** A failure aborts the communicator, as a rank that never arrives does for any
     * collective: later calls throw [CommunicatorAbortedException]. The barrier's messages travel on a
     * channel of their own that no [recv] matches, `ANY_TAG` and `ANY_SOURCE` included. A [timeout]
     * that is not positive: [IllegalArgumentException], nothing sent. Cancellation as for [recv].
     * The communicators tpcomm creates record it once, as `monitoredBarrier` with its own sequence
     * number, and issue it in call order as one operation (its messages are its steps). Thread-safe.
     */
    public suspend fun monitoredBarrier(timeout: Duration, waitAllRanks: Boolean = false) {
        MonitoredBarrier.run(this, MonitoredBarrier.taggedChannel(this), timeout, waitAllRanks)
    }

    /**
     * Sends [tensor]'s bytes to rank [dst] with [tag] (>= 0). Returns once the tensor may be
     * reused. Messages between one pair of ranks with one tag arrive in the order sent.
     */
    public suspend fun send(tensor: Tensor, dst: Int, tag: Int = 0)

    /**
     * Receives a message from [src] (or [ANY_SOURCE]) with [tag] (or [ANY_TAG]) into [tensor],
     * whose byte size must equal the message's. Returns who sent it.
     *
     * An enclosing `withTimeout` that expires raises [CommunicationTimeoutException] naming `recv`,
     * as for collectives. What happens to the communicator is the backend's: the local backend
     * withdraws the receive (it never consumes or writes a message afterwards) and stays usable; MPI
     * aborts the communicator, since a blocking receive in progress cannot be withdrawn.
     */
    public suspend fun recv(tensor: Tensor, src: Int, tag: Int = 0): MessageInfo

    /**
     * Issues every send and receive of [ops] at once, in list order, and returns when all of them
     * completed: PyTorch's `batch_isend_irecv`, the way to write any exchange whose transfers must
     * progress together (a ring, a pairwise swap, a pipeline stage sending to and receiving from both
     * neighbours). Returns one [MessageInfo] per element, in order: for a receive what [recv] returns,
     * for a send its destination, tag and byte size.
     *
     * **Deadlock-free in any order.** No element waits for another before it is posted, so the batch
     * completes whatever the order of its elements on each rank (a send listed before the receive it
     * waits for included), also for messages above a backend's eager limit, which complete only when
     * matched. The peers must issue the matching calls, in a batch or as plain [send]/[recv]. Messages
     * between two ranks with one tag match in the order they were issued, as for [send] and [recv]. On
     * NCCL and RCCL the batch is one `ncclGroupStart`/`ncclGroupEnd` group (tags must be 0, no
     * [ANY_SOURCE]); on the other backends each element is issued as its own [send] or [recv].
     *
     * **Arguments.** Every element is checked as [send] or [recv] checks it, and a receive buffer that
     * shares memory with another element's tensor is refused, all before anything is issued
     * ([IllegalArgumentException] naming the element; nothing moves, the communicator stays usable).
     * An empty list returns an empty list at once.
     *
     * **Failure and cancellation** as for [send] and [recv]: when an element fails, the batch throws
     * that failure (the other elements are cancelled); past the deadline it throws
     * [CommunicationTimeoutException]; cancelling the caller cancels every element still in flight.
     * The flight recorder keeps each element as its own operation (`send`/`recv`, or one `sendRecv`
     * on NCCL/RCCL). Thread-safe, as every method.
     */
    public suspend fun sendRecv(ops: List<PointToPoint>): List<MessageInfo> {
        dev.tpcomm.spi.CollectiveValidator(worldSize, device, nativeMemory = false).sendRecv(ops)
        return dev.tpcomm.spi.PointToPointBatch.run(this, ops)
    }

    /**
     * Waits for a message from [src] (or [ANY_SOURCE]) with [tag] (or [ANY_TAG]) without receiving
     * it, and says its source, tag and size, so a receiver can allocate a buffer of that size.
     */
    public suspend fun probe(src: Int = ANY_SOURCE, tag: Int = ANY_TAG): MessageInfo

    /**
     * Collective: splits this communicator into disjoint sub-communicators, one per distinct
     * [color], ordered by ([key], rank). Ranks passing a null color get null. Every rank must call.
     */
    public suspend fun split(color: Int?, key: Int = rank): Communicator?

    /**
     * Collective: a sub-communicator of [ranks] (in the given order), or null on non-members.
     * Every rank must call with the same list.
     */
    public suspend fun group(ranks: List<Int>): Communicator? {
        dev.tpcomm.spi.CollectiveChecks.group(ranks, worldSize)
        val position = ranks.indexOf(rank)
        return split(if (position >= 0) 0 else null, if (position >= 0) position else 0)
    }

    /**
     * Every rank's [value], in rank order, encoded with kotlinx-serialization (never Java serialization).
     *
     * **One operation.** An object collective is several library calls (the encoded lengths, then
     * the padded payloads), but to its caller it is one collective: the communicators tpcomm creates
     * issue it atomically in call order (no call of this rank is issued between its steps, however
     * the calls are started: back to back with `startCollective`, from Java futures, next to tensor
     * collectives), record it once under its own name and sequence number (`allGatherObject #12`),
     * and name it in every exception; a peer that calls a tensor collective at its place fails with
     * [CollectiveMismatchException] naming both. **Cost** as for [gatherObject], with an all-gather
     * of the padded encodings. **Failure**: a value a rank cannot encode fails there with the
     * serializer's exception and on every other rank at once with a [CommunicationException] naming
     * it, before any payload moves; the communicator stays usable. Cancellation and deadlines as for
     * a collective (the deadline runs from the call to the end of the last step).
     */
    public suspend fun <T> allGatherObject(value: T, serializer: KSerializer<T>): List<T> =
        ObjectProtocol.allGather(this, HostObjectTransport(this), value, serializer)

    /**
     * [root]'s [value] on every rank (encoded with kotlinx-serialization); non-roots may pass null.
     * One operation, as [allGatherObject]. A null [value] on [root] is an [IllegalArgumentException]
     * there and, at once, a [CommunicationException] naming the root on every other rank (the root
     * announces it in the length exchange; no payload moves; the communicator stays usable).
     */
    public suspend fun <T> broadcastObject(value: T?, root: Int, serializer: KSerializer<T>): T =
        ObjectProtocol.broadcast(this, HostObjectTransport(this), value, root, serializer)

    /**
     * On [root], every rank's [value] in rank order; null on the other ranks (PyTorch's
     * `gather_object`). Values are encoded with kotlinx-serialization (never Java serialization).
     *
     * **Cost.** One [allGather] of one `Int64` per rank (the encoded lengths, 8 bytes x `worldSize`
     * on every rank), then one [gather] of the encodings padded to the longest: [root] receives
     * `worldSize` x the longest encoding, the other ranks send one padded encoding each. Gather
     * traffic, not `worldSize` all-gathers; with very uneven sizes the padding is the overhead.
     *
     * **Failure** as for [allGatherObject]: every rank sees every length, so when a rank cannot encode
     * its value (its own call throws the serializer's exception) or announces a length no encoding can
     * have, every rank fails at once with a [CommunicationException] naming that rank, before the
     * payloads move. Bytes that do not decode fail on [root] only, with a [CommunicationException]
     * naming the sender. [root] out of range: [IllegalArgumentException] on every rank, nothing moves.
     * Cancellation and deadlines as for the collectives it uses.
     */
    public suspend fun <T> gatherObject(value: T, root: Int, serializer: KSerializer<T>): List<T>? =
        ObjectProtocol.gather(this, HostObjectTransport(this), value, root, serializer)

    /**
     * Element `rank` of [root]'s [values] on every rank (PyTorch's `scatter_object_list`). [values]
     * is read on [root] only, where it must hold exactly `worldSize` values; other ranks may pass null.
     *
     * **Cost.** One [broadcast] of one `Int64` per rank (the encoded lengths), then one [scatter] of
     * the encodings padded to the longest: [root] sends `worldSize` x the longest encoding.
     *
     * **Failure.** A null [values] or one of the wrong size is an [IllegalArgumentException] on
     * [root] and a [CommunicationException] naming the root on the other ranks, at once (the root
     * announces it in the length exchange; no payload moves). A value the root cannot encode: the
     * root throws the serializer's exception and the others a [CommunicationException] naming the
     * root. Bytes that do not decode fail on the receiving rank. [root] out of range:
     * [IllegalArgumentException] on every rank, nothing moves. Cancellation and deadlines as for the
     * collectives it uses.
     */
    public suspend fun <T> scatterObject(values: List<T>?, root: Int, serializer: KSerializer<T>): T =
        ObjectProtocol.scatter(this, HostObjectTransport(this), values, root, serializer)

    /**
     * Sends [value] to rank [dst] with [tag], encoded with kotlinx-serialization: two messages, the
     * encoded length (one `Int64`) then the bytes, matched by [recvObject] on [dst] (PyTorch's
     * `send_object_list`). Returns once both were sent.
     *
     * Messages between two ranks with one tag arrive in the order sent, so successive
     * `sendObject`/`recvObject` pairs match; do not run two `sendObject` calls to one rank with one
     * tag concurrently (their messages could interleave). When [value] cannot be encoded, the
     * receiver is told (it fails at once with a [CommunicationException] naming this rank) and this
     * call throws the serializer's exception. Bad arguments, failure and cancellation as for [send].
     */
    public suspend fun <T> sendObject(value: T, dst: Int, tag: Int, serializer: KSerializer<T>) {
        ObjectProtocol.send(this, HostObjectTransport(this), dev.tpcomm.spi.CollectiveValidator(worldSize, device, nativeMemory = false), value, dst, tag, serializer)
    }

    /**
     * Receives a value sent by [sendObject] from [src] (or [ANY_SOURCE]) with [tag] (or [ANY_TAG]).
     * A length no encoding can have or bytes that do not decode as [T] are a
     * [CommunicationException] naming the sender; bad arguments, failure and cancellation as for [recv].
     */
    public suspend fun <T> recvObject(src: Int, tag: Int, serializer: KSerializer<T>): T =
        ObjectProtocol.recv(this, HostObjectTransport(this), dev.tpcomm.spi.CollectiveValidator(worldSize, device, nativeMemory = false), src, tag, serializer)

    /**
     * Aborts this communicator on this rank, as a failure would (PyTorch's `ProcessGroup.abort`,
     * NCCL's `ncclCommAbort`): unless it failed before, every call in flight on it ends with a
     * [CommunicationException], every later call throws [CommunicatorAbortedException] naming
     * [reason], and its peers are told as far as the backend can: in process every rank of the
     * communicator fails at once; under MPI an abort notice reaches them (a call already waiting may
     * still end at its own deadline); on NCCL and RCCL the peers end at their own deadline. Communicators split from this one are not aborted. For a
     * watchdog of your own that gives up on a stuck job, or a rank that must leave a communicator
     * its peers are waiting in.
     *
     * Returns false when the communicator had failed already (the first failure stays). Thread-safe;
     * never blocks; may be called from any thread while a call is blocked in the library. [close]
     * still releases the communicator afterwards.
     */
    public fun abort(reason: String = "aborted by its user"): Boolean

    /**
     * True once this communicator failed on this rank (a timeout, a mismatch, a library error, a
     * cancelled in-flight call, a peer's abort, [abort]): every later call throws
     * [CommunicatorAbortedException]. Closing is not a failure. Thread-safe.
     */
    public val isAborted: Boolean

    public companion object {
        /** Source wildcard for [recv] and [probe]. */
        public const val ANY_SOURCE: Int = -1

        /** Tag wildcard for [recv] and [probe]. */
        public const val ANY_TAG: Int = -1
    }
}
