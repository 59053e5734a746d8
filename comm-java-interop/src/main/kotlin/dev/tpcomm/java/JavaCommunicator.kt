package dev.tpcomm.java

import dev.tpcomm.CommunicationException
import dev.tpcomm.Communicator
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.Device
import dev.tpcomm.MessageInfo
import dev.tpcomm.PointToPoint
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.DEFAULT_FUSION_THRESHOLD_BYTES
import dev.tpcomm.coroutines.DeviceMesh
import dev.tpcomm.coroutines.GradientBucket
import dev.tpcomm.coroutines.Overlapping
import dev.tpcomm.coroutines.allReduceCoalesced
import dev.tpcomm.coroutines.reproducible
import dev.tpcomm.spi.CommunicationErrors
import java.util.concurrent.CompletableFuture
import kotlinx.coroutines.CoroutineName
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.SupervisorJob
import kotlinx.coroutines.async
import kotlinx.coroutines.future.asCompletableFuture
import kotlinx.coroutines.runBlocking
import kotlinx.serialization.KSerializer
import kotlin.time.toKotlinDuration

/**
 * A [Communicator] for Java: every collective as a method returning a [CompletableFuture], and a
 * blocking twin of each (`allReduceBlocking`, ...). Obtain one from [JavaComm].
 *
 * **Issue order.** A future-returning method issues its operation before it returns, in the calling
 * thread: calls made back to back from one thread are issued in that order, as every rank must
 * issue collectives in the same order. The operation then proceeds while the caller does other work
 * (compute/communication overlap); the future completes on a tpcomm worker thread.
 *
 * **Failure.** Futures never throw at call time. Bad arguments, a null reference from Java
 * included (`"allReduce: tensor is null; pass a tensor"`), complete the future exceptionally
 * with [IllegalArgumentException] (buffers unchanged, communicator still usable); a failed, timed-out
 * or mismatched collective completes it exceptionally with the [CommunicationException] subclass
 * itself ([dev.tpcomm.CommunicationTimeoutException], [dev.tpcomm.CollectiveMismatchException],
 * [CommunicatorAbortedException]). `future.get()` wraps it in `ExecutionException` and
 * `future.join()` in `CompletionException`, as the JDK does; the blocking methods throw it
 * unwrapped. Reference parameters are declared nullable for that reason only: Java can pass null,
 * and null is refused like any other bad argument, never with a `NullPointerException`.
 *
 * **Cancellation.** Cancelling a future (`cancel`, `orTimeout`, `completeExceptionally`) cancels its
 * operation. A collective cannot finish without all its ranks, so cancelling one in flight aborts
 * the communicator: every pending and later call on every rank fails with a
 * [CommunicationException]. If the thread in a blocking method is interrupted, the operation is
 * cancelled the same way, the interrupt flag is set again, and [CommunicatorAbortedException] is
 * thrown.
 *
 * **Objects.** `allGatherObject`, `broadcastObject`, `gatherObject`, `scatterObject` and
 * `sendObject`/`recvObject` move any value, not only tensors. From Java,
 * pass the value's `Class` (for classes kotlinx.serialization knows: Kotlin `@Serializable`
 * classes, `String`, boxed primitives) or an [ObjectCodec] (any Java record or POJO, with the
 * serializer you already use). A codec that throws on one rank makes every rank fail with
 * [ObjectCodecException], never a hang.
 *
 * **Tensors.** Do not read or write a tensor while an operation on it is in flight.
 *
 * Thread-safe. [close] closes the underlying communicator: operations still pending then fail.
 */
public class JavaCommunicator internal constructor(private val comm: Communicator) : AutoCloseable {
    private val scope = CoroutineScope(SupervisorJob() + Dispatchers.Default + CoroutineName("tpcomm-java rank ${comm.rank}"))

    /** This rank, in `0 until worldSize`. */
    public val rank: Int get() = comm.rank

    /** Number of ranks. */
    public val worldSize: Int get() = comm.worldSize

    /** Name of the backend: `local`, `mpi`, `nccl`, `rccl`, ... */
    public val backendName: String get() = comm.backendName

    /** The device whose tensors this communicator moves. */
    public val device: Device get() = comm.device

    /** The Kotlin [Communicator] behind this facade (for Kotlin code and the coroutine helpers). */
    public fun unwrap(): Communicator = comm

    /**
     * This communicator with **reproducible reductions** (docs/reproducible.md): its `allReduce`,
     * `reduce`, `reduceScatter`, `reduceScatterV` (futures and blocking) and the fused and bucketed
     * methods give, for floating-point `Sum`, `Avg` and `PreMulSum`, each element's correctly rounded
     * exact sum: the same bits on any world size, rank order, backend and split into calls. Every other
     * method, and [close], are this communicator's (the facade returned is the same communicator:
     * closing it closes this one). Cheap; the same facade is returned each time.
     * `jcomm.reproducible().allReduceBlocking(grad)`. The opposite, for a communicator created with
     * `CommConfig.builder().reproducibleReductions(true)`, is [defaultReductions].
     */
    public fun reproducible(): JavaCommunicator = reproducibleView

    /** This communicator with the backend's own (default) reductions; see [reproducible]. */
    public fun defaultReductions(): JavaCommunicator = defaultView

    private val reproducibleView: JavaCommunicator by lazy { JavaCommunicator(comm.reproducible(true)) }
    private val defaultView: JavaCommunicator by lazy { JavaCommunicator(comm.reproducible(false)) }

    // ---- futures -------------------------------------------------------------------------------

    /**
     * Reduces [tensor] across ranks with [op], in place; the future resolves to [tensor]. See [Communicator.allReduce].
     * Every reducing method takes any [ReduceOp]: `ReduceOp.Sum`, ..., or `new ReduceOp.PreMulSum(1.0 / n)` to
     * average in one pass (each rank its own factor).
     */
    @JvmOverloads
    public fun allReduce(tensor: Tensor?, op: ReduceOp? = ReduceOp.Sum): CompletableFuture<Tensor> = issue { comm.allReduce(t(tensor, "allReduce"), op(op, "allReduce")) }

    /** Copies [root]'s [tensor] into every rank's [tensor]; resolves to [tensor]. See [Communicator.broadcast]. */
    public fun broadcast(tensor: Tensor?, root: Int): CompletableFuture<Tensor> = issue { comm.broadcast(t(tensor, "broadcast"), root) }

    /** Reduces [tensor] with [op] into [root]'s [tensor]; resolves to [tensor]. See [Communicator.reduce]. */
    @JvmOverloads
    public fun reduce(tensor: Tensor?, root: Int, op: ReduceOp? = ReduceOp.Sum): CompletableFuture<Tensor> =
        issue { comm.reduce(t(tensor, "reduce"), root, op(op, "reduce")) }

    /** Every rank's [input] concatenated in rank order along [dim], as a new tensor. See [Communicator.allGather]. */
    @JvmOverloads
    public fun allGather(input: Tensor?, dim: Int = 0): CompletableFuture<Tensor> = issue { comm.allGather(t(input, "allGather", "input"), dim) }

    /** [allGather] into the caller's [output]; resolves to [output]. See [Communicator.allGatherInto]. */
    @JvmOverloads
    public fun allGatherInto(output: Tensor?, input: Tensor?, dim: Int = 0): CompletableFuture<Tensor> =
        issue { comm.allGatherInto(t(output, "allGatherInto", "output"), t(input, "allGatherInto", "input"), dim) }

    /** This rank's chunk (along [dim]) of [input] reduced across ranks with [op]. See [Communicator.reduceScatter]. */
    @JvmOverloads
    public fun reduceScatter(input: Tensor?, op: ReduceOp? = ReduceOp.Sum, dim: Int = 0): CompletableFuture<Tensor> =
        issue { comm.reduceScatter(t(input, "reduceScatter", "input"), op(op, "reduceScatter"), dim) }

    /** [reduceScatter] into the caller's [output]; resolves to [output]. See [Communicator.reduceScatterInto]. */
    @JvmOverloads
    public fun reduceScatterInto(output: Tensor?, input: Tensor?, op: ReduceOp? = ReduceOp.Sum, dim: Int = 0): CompletableFuture<Tensor> =
        issue { comm.reduceScatterInto(t(output, "reduceScatterInto", "output"), t(input, "reduceScatterInto", "input"), op(op, "reduceScatterInto"), dim) }

    /** On [root], every rank's [input] concatenated along [dim]; on other ranks the future resolves to null. See [Communicator.gather]. */
    @JvmOverloads
    public fun gather(input: Tensor?, root: Int, dim: Int = 0): CompletableFuture<Tensor?> = issue { comm.gather(t(input, "gather", "input"), root, dim) }

    /** Writes chunk `rank` of [root]'s [input] (null on other ranks) into [output]; resolves to null. See [Communicator.scatter]. */
    @JvmOverloads
    public fun scatter(output: Tensor?, input: Tensor?, root: Int, dim: Int = 0): CompletableFuture<Void?> =
        issue { comm.scatter(t(output, "scatter", "output"), input, root, dim); null }

    /** Exchanges the chunks of [input] along [dim] between all ranks; resolves to a new tensor. See [Communicator.allToAll]. */
    @JvmOverloads
    public fun allToAll(input: Tensor?, dim: Int = 0): CompletableFuture<Tensor> = issue { comm.allToAll(t(input, "allToAll", "input"), dim) }

    /**
     * Every rank's [input] concatenated in rank order along dim 0, where rank `r` contributes
     * `sizes[r]` rows (one entry per rank, the same list on every rank); resolves to a new tensor.
     * See [Communicator.allGatherV].
     */
    public fun allGatherV(input: Tensor?, sizes: List<Int>?): CompletableFuture<Tensor> =
        issue { comm.allGatherV(t(input, "allGatherV", "input"), sizes(sizes, "allGatherV", "sizes")) }

    /** [allGatherV] into the caller's [output] (`sizes` summed rows); resolves to [output]. See [Communicator.allGatherVInto]. */
    public fun allGatherVInto(output: Tensor?, input: Tensor?, sizes: List<Int>?): CompletableFuture<Tensor> =
        issue { comm.allGatherVInto(t(output, "allGatherVInto", "output"), t(input, "allGatherVInto", "input"), sizes(sizes, "allGatherVInto", "sizes")) }

    /**
     * [input] (`sizes` summed rows on every rank) reduced across ranks with [op]; resolves to this
     * rank's `sizes[rank]` rows of the result. See [Communicator.reduceScatterV].
     */
    @JvmOverloads
    public fun reduceScatterV(input: Tensor?, sizes: List<Int>?, op: ReduceOp? = ReduceOp.Sum): CompletableFuture<Tensor> =
        issue { comm.reduceScatterV(t(input, "reduceScatterV", "input"), sizes(sizes, "reduceScatterV", "sizes"), op(op, "reduceScatterV")) }

    /** [reduceScatterV] into the caller's [output]; resolves to [output]. See [Communicator.reduceScatterVInto]. */
    @JvmOverloads
    public fun reduceScatterVInto(output: Tensor?, input: Tensor?, sizes: List<Int>?, op: ReduceOp? = ReduceOp.Sum): CompletableFuture<Tensor> =
        issue {
            comm.reduceScatterVInto(
                t(output, "reduceScatterVInto", "output"), t(input, "reduceScatterVInto", "input"),
                sizes(sizes, "reduceScatterVInto", "sizes"), op(op, "reduceScatterVInto"),
            )
        }

    /**
     * Sends `inputSplits[j]` rows of [input] (in order, along dim 0) to each rank `j` and resolves to
     * a new tensor of the `outputSplits[j]` rows received from each rank `j`, in rank order
     * (PyTorch's `all_to_all_single` with split sizes). See [Communicator.allToAllV].
     */
    public fun allToAllV(input: Tensor?, inputSplits: List<Int>?, outputSplits: List<Int>?): CompletableFuture<Tensor> =
        issue {
            comm.allToAllV(t(input, "allToAllV", "input"), sizes(inputSplits, "allToAllV", "inputSplits"), sizes(outputSplits, "allToAllV", "outputSplits"))
        }

    /** [allToAllV] into the caller's [output]; resolves to [output]. See [Communicator.allToAllVInto]. */
    public fun allToAllVInto(output: Tensor?, input: Tensor?, inputSplits: List<Int>?, outputSplits: List<Int>?): CompletableFuture<Tensor> =
        issue {
            comm.allToAllVInto(
                t(output, "allToAllVInto", "output"), t(input, "allToAllVInto", "input"),
                sizes(inputSplits, "allToAllVInto", "inputSplits"), sizes(outputSplits, "allToAllVInto", "outputSplits"),
            )
        }

    /** Resolves (to null) once every rank has entered the barrier. */
    public fun barrier(): CompletableFuture<Void?> = issue { comm.barrier(); null }

    /**
     * A barrier that names the ranks that did not reach it within [timeout]: resolves (to null) when
     * every rank arrived, otherwise completes exceptionally with [dev.tpcomm.MonitoredBarrierException]
     * whose `getMissingRanks()` names the first missing rank, or all of them with [waitAllRanks]. A null
     * or non-positive [timeout] completes it with [IllegalArgumentException]. See [Communicator.monitoredBarrier].
     */
    @JvmOverloads
    public fun monitoredBarrier(timeout: java.time.Duration?, waitAllRanks: Boolean = false): CompletableFuture<Void?> =
        issue { comm.monitoredBarrier(monitoredTimeout(timeout), waitAllRanks); null }

    /** Sends [tensor] to [dst] with [tag]; resolves (to null) once [tensor] may be reused. See [Communicator.send]. */
    @JvmOverloads
    public fun send(tensor: Tensor?, dst: Int, tag: Int = 0): CompletableFuture<Void?> = issue { comm.send(t(tensor, "send"), dst, tag); null }

    /** Receives into [tensor] from [src] (or [Communicator.ANY_SOURCE]) with [tag] (or [Communicator.ANY_TAG]). See [Communicator.recv]. */
    @JvmOverloads
    public fun recv(tensor: Tensor?, src: Int, tag: Int = 0): CompletableFuture<MessageInfo> = issue { comm.recv(t(tensor, "recv"), src, tag) }

    /** Waits for a matching message without receiving it and says its source, tag and size. See [Communicator.probe]. */
    @JvmOverloads
    public fun probe(src: Int = Communicator.ANY_SOURCE, tag: Int = Communicator.ANY_TAG): CompletableFuture<MessageInfo> =
        issue { comm.probe(src, tag) }

    /**
     * Collective: the sub-communicator of the ranks passing the same [color], ordered by ([key], rank);
     * resolves to null on ranks passing a null color. The new communicator is owned by the caller.
     */
    @JvmOverloads
    public fun split(color: Int?, key: Int = rank): CompletableFuture<JavaCommunicator?> =
        issue { comm.split(color, key)?.let(::JavaCommunicator) }

    /** Collective: the sub-communicator of [ranks] (in that order), or null on non-members. See [Communicator.group]. */
    public fun group(ranks: List<Int>?): CompletableFuture<JavaCommunicator?> = issue { comm.group(ranksOf(ranks))?.let(::JavaCommunicator) }

    /**
     * Collective: every rank's [value], in rank order, encoded with [serializer] (kotlinx-serialization;
     * from Kotlin code). Java code passes a `Class` or an [ObjectCodec] instead: see the overloads.
     */
    public fun <T> allGatherObject(value: T, serializer: KSerializer<T>?): CompletableFuture<List<T>> =
        issue { comm.allGatherObject(value, serializer(serializer, "allGatherObject")) }

    /**
     * Collective: every rank's [value], in rank order, for a class kotlinx.serialization knows
     * (a Kotlin `@Serializable` class, `String`, boxed primitives), found from [type]:
     *
     * ```java
     * List<Step> steps = comm.allGatherObject(new Step(rank, loss), Step.class).join();
     * ```
     *
     * Values are encoded as JSON (kotlinx-serialization) and move through the backend's own object
     * collectives, so this works on every backend. For a Java record or POJO use the [ObjectCodec] overload. Failures complete the future exceptionally:
     * [IllegalArgumentException] when [type] has no serializer or is generic (`Map.class`,
     * `List.class`: a `Class` cannot say its type arguments; use an [ObjectCodec]) (on every rank,
     * before anything is sent); [ObjectCodecException] on every rank when a value cannot be encoded or decoded (the
     * collective completes and the communicator stays usable); a [CommunicationException] when the
     * collective itself fails.
     */
    public fun <T> allGatherObject(value: T, type: Class<T>?): CompletableFuture<List<T>> =
        issue { ObjectExchange.allGather(comm, value, codecOf(type, "allGatherObject")) }

    /**
     * Collective: every rank's [value], in rank order, encoded and decoded with your [codec]: any
     * serializer, any Java class (records, POJOs). Every rank must pass an equivalent codec.
     *
     * ```java
     * List<Stats> all = comm.allGatherObject(myStats, statsCodec).join();
     * ```
     *
     * If the codec throws on any rank (encoding its own value, or decoding a rank's bytes), the
     * future of **every** rank completes with [ObjectCodecException] naming that rank and the codec's
     * message, with no rank left waiting; the communicator stays usable. A failure of the collective
     * itself completes it with a [CommunicationException].
     */
    public fun <T> allGatherObject(value: T, codec: ObjectCodec<T>?): CompletableFuture<List<T>> =
        issue { ObjectExchange.allGather(comm, value, codec(codec, "allGatherObject")) }

    /**
     * Collective: [root]'s [value] on every rank, encoded with [serializer] (kotlinx-serialization;
     * from Kotlin code); other ranks may pass null. Java code passes a `Class` or an [ObjectCodec] instead.
     */
    public fun <T> broadcastObject(value: T?, root: Int, serializer: KSerializer<T>?): CompletableFuture<T> =
        issue { comm.broadcastObject(value, root, serializer(serializer, "broadcastObject")) }

    /**
     * Collective: [root]'s [value] on every rank (other ranks pass null), for a class
     * kotlinx.serialization knows, found from [type]; every rank, the root included, gets a decoded
     * copy. Failures as for [allGatherObject] with a `Class`; a null value on the root completes
     * every rank's future with [IllegalArgumentException], and so does a [root] outside `0 until worldSize`.
     */
    public fun <T> broadcastObject(value: T?, root: Int, type: Class<T>?): CompletableFuture<T> =
        issue { ObjectExchange.broadcast(comm, value, root, codecOf(type, "broadcastObject")) }

    /**
     * Collective: [root]'s [value] on every rank (other ranks pass null), encoded and decoded with
     * your [codec]; every rank, the root included, gets a decoded copy. If the root's codec cannot
     * encode, or the codec cannot decode, every rank's future completes with [ObjectCodecException];
     * a null value on the root completes every rank's future with [IllegalArgumentException].
     */
    public fun <T> broadcastObject(value: T?, root: Int, codec: ObjectCodec<T>?): CompletableFuture<T> =
        issue { ObjectExchange.broadcast(comm, value, root, codec(codec, "broadcastObject")) }

    /**
     * Issues every send and receive of [ops] at once and resolves, to one [MessageInfo] per element,
     * when all completed: deadlock-free in any order (PyTorch's `batch_isend_irecv`). Make the
     * elements with `PointToPoint.send(tensor, dst[, tag])` and `PointToPoint.recv(tensor, src[, tag])`.
     * See [Communicator.sendRecv].
     */
    public fun sendRecv(ops: List<PointToPoint>?): CompletableFuture<List<MessageInfo>> = issue { comm.sendRecv(opsOf(ops)) }

    /**
     * Collective: on [root], every rank's [value] in rank order; null on the other ranks. Encoded
     * with [serializer] (kotlinx-serialization; from Kotlin code). See [Communicator.gatherObject].
     */
    public fun <T> gatherObject(value: T, root: Int, serializer: KSerializer<T>?): CompletableFuture<List<T>?> =
        issue { comm.gatherObject(value, root, serializer(serializer, "gatherObject")) }

    /**
     * Collective: on [root], every rank's [value] in rank order (null on the other ranks), for a class
     * kotlinx.serialization knows, found from [type] (generic classes are refused with
     * [IllegalArgumentException] before anything is sent, as for [allGatherObject]). Costs a gather,
     * not an all-gather. When a rank's value cannot be encoded, that rank and the root complete with
     * [ObjectCodecException] naming it; bytes that do not decode fail on the root.
     */
    public fun <T> gatherObject(value: T, root: Int, type: Class<T>?): CompletableFuture<List<T>?> =
        issue { ObjectExchange.gather(comm, value, root, codecOf(type, "gatherObject")) }

    /** [gatherObject] with your [codec] (any Java record or POJO); failures as for the `Class` overload. */
    public fun <T> gatherObject(value: T, root: Int, codec: ObjectCodec<T>?): CompletableFuture<List<T>?> =
        issue { ObjectExchange.gather(comm, value, root, codec(codec, "gatherObject")) }

    /**
     * Collective: element `rank` of [root]'s [values] on every rank (other ranks pass null). Encoded
     * with [serializer] (from Kotlin code). See [Communicator.scatterObject].
     */
    public fun <T> scatterObject(values: List<T>?, root: Int, serializer: KSerializer<T>?): CompletableFuture<T> =
        issue { comm.scatterObject(values, root, serializer(serializer, "scatterObject")) }

    /**
     * Collective: element `rank` of [root]'s [values] on every rank (other ranks pass null), for a
     * class kotlinx.serialization knows, found from [type]. A null list or one without exactly
     * `worldSize` values on the root completes every rank's future with [IllegalArgumentException]
     * (no rank waits); a value the root's codec cannot encode, or bytes that do not decode, with
     * [ObjectCodecException].
     */
    public fun <T> scatterObject(values: List<T>?, root: Int, type: Class<T>?): CompletableFuture<T> =
        issue { ObjectExchange.scatter(comm, values, root, codecOf(type, "scatterObject")) }

    /** [scatterObject] with your [codec]; failures as for the `Class` overload. */
    public fun <T> scatterObject(values: List<T>?, root: Int, codec: ObjectCodec<T>?): CompletableFuture<T> =
        issue { ObjectExchange.scatter(comm, values, root, codec(codec, "scatterObject")) }

    /** Sends [value] to [dst] with [tag], encoded with [serializer] (from Kotlin code). See [Communicator.sendObject]. */
    public fun <T> sendObject(value: T, dst: Int, tag: Int, serializer: KSerializer<T>?): CompletableFuture<Void?> =
        issue { comm.sendObject(value, dst, tag, serializer(serializer, "sendObject")); null }

    /**
     * Sends [value] to [dst] with [tag] for a class kotlinx.serialization knows, found from [type];
     * [recvObject] on [dst] receives it. When the codec cannot encode it, this future and the
     * receiver's complete with [ObjectCodecException] (the receiver is told; it does not wait).
     */
    public fun <T> sendObject(value: T, dst: Int, tag: Int, type: Class<T>?): CompletableFuture<Void?> =
        issue { ObjectExchange.send(comm, value, dst, tag, codecOf(type, "sendObject")); null }

    /** [sendObject] with your [codec]. */
    public fun <T> sendObject(value: T, dst: Int, tag: Int, codec: ObjectCodec<T>?): CompletableFuture<Void?> =
        issue { ObjectExchange.send(comm, value, dst, tag, codec(codec, "sendObject")); null }

    /** Receives a value sent by [sendObject] from [src] (or [Communicator.ANY_SOURCE]) with [tag], decoded with [serializer]. See [Communicator.recvObject]. */
    public fun <T> recvObject(src: Int, tag: Int, serializer: KSerializer<T>?): CompletableFuture<T> =
        issue { comm.recvObject(src, tag, serializer(serializer, "recvObject")) }

    /** Receives a value sent by the `Class` overload of [sendObject]; [ObjectCodecException] when it cannot be encoded or decoded. */
    public fun <T> recvObject(src: Int, tag: Int, type: Class<T>?): CompletableFuture<T> =
        issue { ObjectExchange.recv(comm, src, tag, codecOf(type, "recvObject")) }

    /** Receives a value sent by the [ObjectCodec] overload of [sendObject]. */
    public fun <T> recvObject(src: Int, tag: Int, codec: ObjectCodec<T>?): CompletableFuture<T> =
        issue { ObjectExchange.recv(comm, src, tag, codec(codec, "recvObject")) }

    /**
     * All-reduces a persistent [GradientBucket] in place with one collective over its buffer (its
     * views are the gradients your framework computes into; see `dev.tpcomm.coroutines.GradientBucket`);
     * the future resolves to [bucket]. Failures are those of [allReduce].
     */
    @JvmOverloads
    public fun allReduceBucket(bucket: GradientBucket?, op: ReduceOp? = ReduceOp.Sum): CompletableFuture<GradientBucket> =
        issue { required(bucket, "allReduceBucket", "bucket", "a GradientBucket").allReduce(comm, op(op, "allReduceBucket")) }

    /**
     * All-reduces many tensors with few collectives (tensor fusion): grouped by dtype, packed into
     * buffers of at most [thresholdBytes], one all-reduce per buffer; resolves to [tensors], each
     * reduced in place. See `dev.tpcomm.coroutines.allReduceCoalesced`.
     */
    @JvmOverloads
    public fun allReduceCoalesced(
        tensors: List<Tensor>?,
        op: ReduceOp? = ReduceOp.Sum,
        thresholdBytes: Long = DEFAULT_FUSION_THRESHOLD_BYTES,
    ): CompletableFuture<List<Tensor>> = issue { comm.allReduceCoalesced(tensorsOf(tensors, "allReduceCoalesced"), op(op, "allReduceCoalesced"), thresholdBytes) }

    /**
     * Collective: lays the ranks out as a mesh of [shape] with dimension [names] and builds one
     * communicator per dimension (one `split` per dimension). Every rank must call it with the same
     * arguments. Bad arguments complete the future with [IllegalArgumentException]. See [JavaDeviceMesh].
     */
    public fun deviceMesh(shape: List<Int>?, names: List<String>?): CompletableFuture<JavaDeviceMesh> =
        issue { mesh(shape, names, "deviceMesh") }

    // ---- blocking twins ------------------------------------------------------------------------

    /** [allReduce], waiting; throws the [CommunicationException] or [IllegalArgumentException] itself. */
    @JvmOverloads
    public fun allReduceBlocking(tensor: Tensor?, op: ReduceOp? = ReduceOp.Sum): Tensor = block("allReduce") { comm.allReduce(t(tensor, "allReduce"), op(op, "allReduce")) }

    /** [broadcast], waiting. */
    public fun broadcastBlocking(tensor: Tensor?, root: Int): Tensor = block("broadcast") { comm.broadcast(t(tensor, "broadcast"), root) }

    /** [reduce], waiting. */
    @JvmOverloads
    public fun reduceBlocking(tensor: Tensor?, root: Int, op: ReduceOp? = ReduceOp.Sum): Tensor = block("reduce") { comm.reduce(t(tensor, "reduce"), root, op(op, "reduce")) }

    /** [allGather], waiting. */
    @JvmOverloads
    public fun allGatherBlocking(input: Tensor?, dim: Int = 0): Tensor = block("allGather") { comm.allGather(t(input, "allGather", "input"), dim) }

    /** [allGatherInto], waiting. */
    @JvmOverloads
    public fun allGatherIntoBlocking(output: Tensor?, input: Tensor?, dim: Int = 0): Tensor =
        block("allGatherInto") { comm.allGatherInto(t(output, "allGatherInto", "output"), t(input, "allGatherInto", "input"), dim) }

    /** [reduceScatter], waiting. */
    @JvmOverloads
    public fun reduceScatterBlocking(input: Tensor?, op: ReduceOp? = ReduceOp.Sum, dim: Int = 0): Tensor =
        block("reduceScatter") { comm.reduceScatter(t(input, "reduceScatter", "input"), op(op, "reduceScatter"), dim) }

    /** [reduceScatterInto], waiting. */
    @JvmOverloads
    public fun reduceScatterIntoBlocking(output: Tensor?, input: Tensor?, op: ReduceOp? = ReduceOp.Sum, dim: Int = 0): Tensor =
        block("reduceScatterInto") { comm.reduceScatterInto(t(output, "reduceScatterInto", "output"), t(input, "reduceScatterInto", "input"), op(op, "reduceScatterInto"), dim) }

    /** [gather], waiting; null on ranks other than [root]. */
    @JvmOverloads
    public fun gatherBlocking(input: Tensor?, root: Int, dim: Int = 0): Tensor? = block("gather") { comm.gather(t(input, "gather", "input"), root, dim) }

    /** [scatter], waiting. */
    @JvmOverloads
    public fun scatterBlocking(output: Tensor?, input: Tensor?, root: Int, dim: Int = 0): Unit = block("scatter") { comm.scatter(t(output, "scatter", "output"), input, root, dim) }

    /** [allGatherV], waiting. */
    public fun allGatherVBlocking(input: Tensor?, sizes: List<Int>?): Tensor =
        block("allGatherV") { comm.allGatherV(t(input, "allGatherV", "input"), sizes(sizes, "allGatherV", "sizes")) }

    /** [allGatherVInto], waiting. */
    public fun allGatherVIntoBlocking(output: Tensor?, input: Tensor?, sizes: List<Int>?): Tensor =
        block("allGatherVInto") { comm.allGatherVInto(t(output, "allGatherVInto", "output"), t(input, "allGatherVInto", "input"), sizes(sizes, "allGatherVInto", "sizes")) }

    /** [reduceScatterV], waiting. */
    @JvmOverloads
    public fun reduceScatterVBlocking(input: Tensor?, sizes: List<Int>?, op: ReduceOp? = ReduceOp.Sum): Tensor =
        block("reduceScatterV") { comm.reduceScatterV(t(input, "reduceScatterV", "input"), sizes(sizes, "reduceScatterV", "sizes"), op(op, "reduceScatterV")) }

    /** [reduceScatterVInto], waiting. */
    @JvmOverloads
    public fun reduceScatterVIntoBlocking(output: Tensor?, input: Tensor?, sizes: List<Int>?, op: ReduceOp? = ReduceOp.Sum): Tensor =
        block("reduceScatterVInto") {
            comm.reduceScatterVInto(
                t(output, "reduceScatterVInto", "output"), t(input, "reduceScatterVInto", "input"),
                sizes(sizes, "reduceScatterVInto", "sizes"), op(op, "reduceScatterVInto"),
            )
        }

    /** [allToAllV], waiting. */
    public fun allToAllVBlocking(input: Tensor?, inputSplits: List<Int>?, outputSplits: List<Int>?): Tensor =
        block("allToAllV") {
            comm.allToAllV(t(input, "allToAllV", "input"), sizes(inputSplits, "allToAllV", "inputSplits"), sizes(outputSplits, "allToAllV", "outputSplits"))
        }

    /** [allToAllVInto], waiting. */
    public fun allToAllVIntoBlocking(output: Tensor?, input: Tensor?, inputSplits: List<Int>?, outputSplits: List<Int>?): Tensor =
        block("allToAllVInto") {
            comm.allToAllVInto(
                t(output, "allToAllVInto", "output"), t(input, "allToAllVInto", "input"),
                sizes(inputSplits, "allToAllVInto", "inputSplits"), sizes(outputSplits, "allToAllVInto", "outputSplits"),
            )
        }

    /** [allToAll], waiting. */
    @JvmOverloads
    public fun allToAllBlocking(input: Tensor?, dim: Int = 0): Tensor = block("allToAll") { comm.allToAll(t(input, "allToAll", "input"), dim) }

    /** [barrier], waiting. */
    public fun barrierBlocking(): Unit = block("barrier") { comm.barrier() }

    /** [monitoredBarrier], waiting: throws the [dev.tpcomm.MonitoredBarrierException] itself. */
    @JvmOverloads
    public fun monitoredBarrierBlocking(timeout: java.time.Duration?, waitAllRanks: Boolean = false): Unit =
        block("monitoredBarrier") { comm.monitoredBarrier(monitoredTimeout(timeout), waitAllRanks) }

    private fun monitoredTimeout(timeout: java.time.Duration?): kotlin.time.Duration =
        required(timeout, "monitoredBarrier", "timeout", "how long rank 0 waits for the other ranks, e.g. Duration.ofSeconds(30)").toKotlinDuration()

    /** [send], waiting. */
    @JvmOverloads
    public fun sendBlocking(tensor: Tensor?, dst: Int, tag: Int = 0): Unit = block("send") { comm.send(t(tensor, "send"), dst, tag) }

    /** [recv], waiting. */
    @JvmOverloads
    public fun recvBlocking(tensor: Tensor?, src: Int, tag: Int = 0): MessageInfo = block("recv") { comm.recv(t(tensor, "recv"), src, tag) }

    /** [probe], waiting. */
    @JvmOverloads
    public fun probeBlocking(src: Int = Communicator.ANY_SOURCE, tag: Int = Communicator.ANY_TAG): MessageInfo = block("probe") { comm.probe(src, tag) }

    /** [split], waiting; null on ranks passing a null color. */
    @JvmOverloads
    public fun splitBlocking(color: Int?, key: Int = rank): JavaCommunicator? = block("split") { comm.split(color, key)?.let(::JavaCommunicator) }

    /** [group], waiting; null on non-members. */
    public fun groupBlocking(ranks: List<Int>?): JavaCommunicator? = block("group") { comm.group(ranksOf(ranks))?.let(::JavaCommunicator) }

    /** [allGatherObject] with a [KSerializer], waiting. */
    public fun <T> allGatherObjectBlocking(value: T, serializer: KSerializer<T>?): List<T> =
        block("allGatherObject") { comm.allGatherObject(value, serializer(serializer, "allGatherObject")) }

    /** [allGatherObject] with a `Class`, waiting; throws [ObjectCodecException], [IllegalArgumentException] or the [CommunicationException] itself. */
    public fun <T> allGatherObjectBlocking(value: T, type: Class<T>?): List<T> =
        block("allGatherObject") { ObjectExchange.allGather(comm, value, codecOf(type, "allGatherObject")) }

    /** [allGatherObject] with an [ObjectCodec], waiting; throws [ObjectCodecException] or the [CommunicationException] itself. */
    public fun <T> allGatherObjectBlocking(value: T, codec: ObjectCodec<T>?): List<T> =
        block("allGatherObject") { ObjectExchange.allGather(comm, value, codec(codec, "allGatherObject")) }

    /** [broadcastObject] with a [KSerializer], waiting. */
    public fun <T> broadcastObjectBlocking(value: T?, root: Int, serializer: KSerializer<T>?): T =
        block("broadcastObject") { comm.broadcastObject(value, root, serializer(serializer, "broadcastObject")) }

    /** [broadcastObject] with a `Class`, waiting; throws [ObjectCodecException], [IllegalArgumentException] or the [CommunicationException] itself. */
    public fun <T> broadcastObjectBlocking(value: T?, root: Int, type: Class<T>?): T =
        block("broadcastObject") { ObjectExchange.broadcast(comm, value, root, codecOf(type, "broadcastObject")) }

    /** [broadcastObject] with an [ObjectCodec], waiting; throws [ObjectCodecException], [IllegalArgumentException] or the [CommunicationException] itself. */
    public fun <T> broadcastObjectBlocking(value: T?, root: Int, codec: ObjectCodec<T>?): T =
        block("broadcastObject") { ObjectExchange.broadcast(comm, value, root, codec(codec, "broadcastObject")) }

    /** [sendRecv], waiting. */
    public fun sendRecvBlocking(ops: List<PointToPoint>?): List<MessageInfo> = block("sendRecv") { comm.sendRecv(opsOf(ops)) }

    /** [gatherObject] with a [KSerializer], waiting; null on ranks other than [root]. */
    public fun <T> gatherObjectBlocking(value: T, root: Int, serializer: KSerializer<T>?): List<T>? =
        block("gatherObject") { comm.gatherObject(value, root, serializer(serializer, "gatherObject")) }

    /** [gatherObject] with a `Class`, waiting; throws [ObjectCodecException], [IllegalArgumentException] or the [CommunicationException] itself. */
    public fun <T> gatherObjectBlocking(value: T, root: Int, type: Class<T>?): List<T>? =
        block("gatherObject") { ObjectExchange.gather(comm, value, root, codecOf(type, "gatherObject")) }

    /** [gatherObject] with an [ObjectCodec], waiting. */
    public fun <T> gatherObjectBlocking(value: T, root: Int, codec: ObjectCodec<T>?): List<T>? =
        block("gatherObject") { ObjectExchange.gather(comm, value, root, codec(codec, "gatherObject")) }

    /** [scatterObject] with a [KSerializer], waiting. */
    public fun <T> scatterObjectBlocking(values: List<T>?, root: Int, serializer: KSerializer<T>?): T =
        block("scatterObject") { comm.scatterObject(values, root, serializer(serializer, "scatterObject")) }

    /** [scatterObject] with a `Class`, waiting; throws [ObjectCodecException], [IllegalArgumentException] or the [CommunicationException] itself. */
    public fun <T> scatterObjectBlocking(values: List<T>?, root: Int, type: Class<T>?): T =
        block("scatterObject") { ObjectExchange.scatter(comm, values, root, codecOf(type, "scatterObject")) }

    /** [scatterObject] with an [ObjectCodec], waiting. */
    public fun <T> scatterObjectBlocking(values: List<T>?, root: Int, codec: ObjectCodec<T>?): T =
        block("scatterObject") { ObjectExchange.scatter(comm, values, root, codec(codec, "scatterObject")) }

    /** [sendObject] with a [KSerializer], waiting. */
    public fun <T> sendObjectBlocking(value: T, dst: Int, tag: Int, serializer: KSerializer<T>?): Unit =
        block("sendObject") { comm.sendObject(value, dst, tag, serializer(serializer, "sendObject")) }

    /** [sendObject] with a `Class`, waiting. */
    public fun <T> sendObjectBlocking(value: T, dst: Int, tag: Int, type: Class<T>?): Unit =
        block("sendObject") { ObjectExchange.send(comm, value, dst, tag, codecOf(type, "sendObject")) }

    /** [sendObject] with an [ObjectCodec], waiting. */
    public fun <T> sendObjectBlocking(value: T, dst: Int, tag: Int, codec: ObjectCodec<T>?): Unit =
        block("sendObject") { ObjectExchange.send(comm, value, dst, tag, codec(codec, "sendObject")) }

    /** [recvObject] with a [KSerializer], waiting. */
    public fun <T> recvObjectBlocking(src: Int, tag: Int, serializer: KSerializer<T>?): T =
        block("recvObject") { comm.recvObject(src, tag, serializer(serializer, "recvObject")) }

    /** [recvObject] with a `Class`, waiting. */
    public fun <T> recvObjectBlocking(src: Int, tag: Int, type: Class<T>?): T =
        block("recvObject") { ObjectExchange.recv(comm, src, tag, codecOf(type, "recvObject")) }

    /** [recvObject] with an [ObjectCodec], waiting. */
    public fun <T> recvObjectBlocking(src: Int, tag: Int, codec: ObjectCodec<T>?): T =
        block("recvObject") { ObjectExchange.recv(comm, src, tag, codec(codec, "recvObject")) }

    /** [allReduceBucket], waiting. */
    @JvmOverloads
    public fun allReduceBucketBlocking(bucket: GradientBucket?, op: ReduceOp? = ReduceOp.Sum): GradientBucket =
        block("allReduceBucket") { required(bucket, "allReduceBucket", "bucket", "a GradientBucket").allReduce(comm, op(op, "allReduceBucket")) }

    /** [allReduceCoalesced], waiting. */
    @JvmOverloads
    public fun allReduceCoalescedBlocking(
        tensors: List<Tensor>?,
        op: ReduceOp? = ReduceOp.Sum,
        thresholdBytes: Long = DEFAULT_FUSION_THRESHOLD_BYTES,
    ): List<Tensor> = block("allReduceCoalesced") { comm.allReduceCoalesced(tensorsOf(tensors, "allReduceCoalesced"), op(op, "allReduceCoalesced"), thresholdBytes) }

    /** [deviceMesh], waiting. */
    public fun deviceMeshBlocking(shape: List<Int>?, names: List<String>?): JavaDeviceMesh =
        block("deviceMesh") { mesh(shape, names, "deviceMesh") }

    /**
     * Aborts the communicator on this rank, as a failure would ([Communicator.abort]): operations in
     * flight fail (their futures complete exceptionally with a [CommunicationException]), later ones
     * fail with [dev.tpcomm.CommunicatorAbortedException] naming [reason], and the peers are told as
     * far as the backend can. Returns false when it had failed already. Thread-safe; never blocks.
     */
    public fun abort(reason: String): Boolean = comm.abort(reason)

    /** [abort] with the reason "aborted by its user". */
    public fun abort(): Boolean = comm.abort()

    /** True once the communicator failed on this rank ([Communicator.isAborted]). Thread-safe. */
    public val isAborted: Boolean get() = comm.isAborted

    /** Closes the underlying communicator; operations still pending fail with a [CommunicationException]. Idempotent. */
    override fun close() {
        comm.close()
    }

    override fun toString(): String = "JavaCommunicator($backendName rank $rank of $worldSize)"

    // ---- machinery -----------------------------------------------------------------------------

    private fun t(tensor: Tensor?, operation: String, parameter: String = "tensor"): Tensor = required(tensor, operation, parameter, "a tensor")

    private fun op(op: ReduceOp?, operation: String): ReduceOp = required(op, operation, "op", "a ReduceOp (ReduceOp.Sum, ...)")

    /** A list of per-rank row counts from Java: not null, no null element (a `List<Integer>` may hold one). */
    private fun sizes(sizes: List<Int>?, operation: String, parameter: String): List<Int> =
        required(sizes, operation, parameter, "a list of row counts, one per rank").also { list ->
            @Suppress("SENSELESS_COMPARISON")
            for ((i, v) in (list as List<Int?>).withIndex()) {
                require(v != null) { "$operation: $parameter[$i] is null; pass a row count (>= 0) for every rank" }
            }
        }

    private fun ranksOf(ranks: List<Int>?): List<Int> = required(ranks, "group", "ranks", "the list of member ranks")

    private fun tensorsOf(tensors: List<Tensor>?, operation: String): List<Tensor> =
        required(tensors, operation, "tensors", "a list of tensors (it may be empty)").onEachIndexed { i, x ->
            @Suppress("SENSELESS_COMPARISON")
            require((x as Tensor?) != null) { "$operation: tensors[$i] is null; pass a list of tensors without nulls" }
        }

    private fun opsOf(ops: List<PointToPoint>?): List<PointToPoint> =
        required(ops, "sendRecv", "ops", "a list of PointToPoint.send / PointToPoint.recv (it may be empty)").onEachIndexed { i, x ->
            @Suppress("SENSELESS_COMPARISON")
            require((x as PointToPoint?) != null) { "sendRecv: ops[$i] is null; pass a list of PointToPoint elements without nulls" }
        }

    private fun <T> serializer(serializer: KSerializer<T>?, operation: String): KSerializer<T> =
        required(serializer, operation, "serializer", "a KSerializer (or use the Class or ObjectCodec overload)")

    private fun <T> codec(codec: ObjectCodec<T>?, operation: String): ObjectCodec<T> = required(codec, operation, "codec", "an ObjectCodec")

    private fun <T> codecOf(type: Class<T>?, operation: String): ObjectCodec<T> =
        SerializerCodec.forClass(required(type, operation, "type", "the value's Class (or use the ObjectCodec overload)"))

    private suspend fun mesh(shape: List<Int>?, names: List<String>?, operation: String): JavaDeviceMesh =
        JavaDeviceMesh(DeviceMesh(comm, required(shape, operation, "shape", "the mesh's sizes"), required(names, operation, "names", "the dimensions' names")))

    /** Starts [operation] undispatched: it is issued in the calling thread before this returns, and ([Overlapping]) no backend holds that thread for it. */
    private fun <T> issue(operation: suspend () -> T): CompletableFuture<T> =
        scope.async(Overlapping, start = CoroutineStart.UNDISPATCHED) { operation() }.asCompletableFuture()

    /** Runs [operation] to completion in the calling thread; exceptions come out as thrown, never wrapped. */
    private fun <T> block(name: String, operation: suspend () -> T): T {
        try {
            return runBlocking { operation() }
        } catch (e: InterruptedException) {
            Thread.currentThread().interrupt()
            throw CommunicationErrors(comm.rank, comm.backendName).aborted(
                name, -1, "the thread was interrupted while waiting; the operation was cancelled, which aborts the communicator", e,
            )
        }
    }
}
