package dev.tpcomm

import dev.tpcomm.spi.CollectiveShapes
import kotlinx.serialization.KSerializer

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
 * which the calls were made. Do not modify a tensor while a collective on it is in flight.
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

    /** Returns once every rank has called it. */
    public suspend fun barrier()

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

    /** Every rank's [value], in rank order, encoded with kotlinx-serialization (never Java serialization). */
    public suspend fun <T> allGatherObject(value: T, serializer: KSerializer<T>): List<T> =
        ObjectCollectives.allGather(this, value, serializer)

    /** [root]'s [value] on every rank (encoded with kotlinx-serialization); non-roots may pass null. */
    public suspend fun <T> broadcastObject(value: T?, root: Int, serializer: KSerializer<T>): T =
        ObjectCollectives.broadcast(this, value, root, serializer)

    public companion object {
        /** Source wildcard for [recv] and [probe]. */
        public const val ANY_SOURCE: Int = -1

        /** Tag wildcard for [recv] and [probe]. */
        public const val ANY_TAG: Int = -1
    }
}
