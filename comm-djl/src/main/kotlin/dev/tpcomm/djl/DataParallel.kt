package dev.tpcomm.djl

import ai.djl.ndarray.NDArray
import ai.djl.ndarray.NDManager
import ai.djl.nn.Block
import ai.djl.nn.Parameter
import ai.djl.nn.ParameterList
import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.coroutines.GradientBucket
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.runBlocking
import java.lang.foreign.MemorySegment
import java.nio.ByteBuffer
import java.nio.ByteOrder
import java.util.UUID

/**
 * Data-parallel training for DJL models: after each backward pass, [averageGradients] averages
 * every trainable parameter's gradient across the ranks of [communicator], with one all-reduce per
 * bucket, as PyTorch's `DistributedDataParallel` does. Each rank trains its own copy of the model
 * on its own share of the batch; with the gradients averaged, every rank's optimizer step is the
 * same, and the model follows single-process training on the whole batch.
 *
 * ```kotlin
 * DataParallel(comm, model.block).use { dp ->
 *     dp.broadcastParameters(root = 0)                 // every rank starts from rank 0's weights
 *     for (batch in myShard) {
 *         trainer.newGradientCollector().use { gc -> gc.backward(loss(trainer.forward(batch.data), batch.labels)) }
 *         dp.averageGradients()                        // suspend; averageGradientsBlocking() from Java
 *         trainer.step()
 *     }
 * }
 * ```
 *
 * **Buckets and memory.** The trainable parameters (those that require a gradient) are grouped, in
 * the block's order and per dtype, into [GradientBucket]s of at most [bucketCapBytes] (a larger
 * parameter gets a bucket of its own), allocated once and kept between steps. At the first
 * [averageGradients] each parameter's gradient is copied into its slice of a bucket and then
 * re-pointed at that slice (DJL's `NDArray.set` of a direct buffer re-points a PyTorch array's
 * storage without copying), so from then on backward accumulates straight into the buckets, the
 * optimizer reads and zeroes them there, and each step moves the gradients with one collective
 * per bucket and no copy ("gradient as bucket view"). Every call checks that each gradient still
 * is its slice, and copies and re-points any that is not. Until [close], the model's parameter
 * manager holds the buckets (so their memory outlives a forgotten [DataParallel]); [close] gives
 * every gradient memory of torch's own again (a copy made by DJL, owned by the parameter's manager)
 * and frees the buckets.
 *
 * **Requirements.** DJL's PyTorch engine on the CPU (the gradients must be dense host memory);
 * one device per rank, the parameters' own (the default for a trainer on one CPU); parameters
 * initialized before the constructor runs (`trainer.initialize(shape)`); every rank builds its
 * [DataParallel] from the same architecture and calls [averageGradients] at the same point of each
 * step, in the same order as its other collectives; every trainable parameter gets a gradient on
 * every rank at every step (freeze the others: `parameter.freeze(true)` before construction). Two
 * ranks in one JVM (the in-process backend) must not run their forward/backward passes at the same
 * time: DJL's PyTorch gradient collector is one per JVM at a time.
 *
 * **Failures.** Bad arguments fail in the constructor with [IllegalArgumentException]. A failed,
 * timed-out or mismatched all-reduce throws the communicator's `CommunicationException` from
 * [averageGradients] (the gradients are then undefined: abandon the step). A gradient that cannot
 * be made a view of its bucket (a parameter that took no part in this step, or an engine other
 * than PyTorch) throws [IllegalStateException] naming the parameter, before anything is sent.
 *
 * **Cancellation.** Cancelling [averageGradients] while its all-reduces are in flight aborts the
 * communicator (a collective cannot finish without this rank), as for any collective.
 *
 * **Thread-safety.** Not thread-safe: call it from one coroutine (or thread) per rank, after
 * backward and before the optimizer step, never concurrently with the rank's forward/backward pass
 * or optimizer.
 *
 * @param parameters the model's parameters, `block.getParameters()` (the secondary constructor
 * takes the block itself): every one is broadcast by [broadcastParameters], those that require a
 * gradient are bucketed and averaged.
 * @throws IllegalArgumentException from the constructor if a parameter is not initialized, has a
 * DJL type tpcomm lacks or is not floating point, [bucketCapBytes] is not positive, or no parameter
 * requires a gradient.
 */
public class DataParallel @JvmOverloads constructor(
    /** The ranks the gradients are averaged over (each rank one model replica). From Java: `javaCommunicator.unwrap()`. */
    public val communicator: Communicator,
    parameters: ParameterList,
    /** Largest bucket in bytes (25 MiB by default, DDP's `bucket_cap_mb`); a bigger parameter gets a bucket of its own. */
    public val bucketCapBytes: Long = DEFAULT_BUCKET_CAP_BYTES,
) : AutoCloseable {

    /** The data-parallel helper for [block]'s parameters (`block.getParameters()`), with buckets of at most [bucketCapBytes]. */
    @JvmOverloads
    public constructor(communicator: Communicator, block: Block, bucketCapBytes: Long = DEFAULT_BUCKET_CAP_BYTES) :
        this(communicator, block.parameters, bucketCapBytes)

    private val allParameters: List<Pair<String, Parameter>>
    private val slots: List<List<Slot>>
    private val state: State
    private val keepAliveId = "tpcomm-data-parallel-" + UUID.randomUUID()
    private val managers: List<NDManager>

    /**
     * The persistent buckets, in the order they are reduced; their [GradientBucket.tensors] are the
     * trainable parameters' gradients (once [averageGradients] has run). Owned by this object: do
     * not close them.
     */
    public val buckets: List<GradientBucket>

    /** Names of the parameters whose gradients are averaged, in bucket order. */
    public val parameterNames: List<String>

    init {
        require(bucketCapBytes > 0) { "DataParallel: bucketCapBytes must be > 0, got $bucketCapBytes" }
        allParameters = parameters.keys().zip(parameters.values())
        for ((name, p) in allParameters) {
            require(p.isInitialized) {
                "DataParallel: parameter '$name' is not initialized; initialize the model first (trainer.initialize(inputShape) or block.initialize(...))"
            }
        }
        val trainable = allParameters.filter { (_, p) -> p.requiresGradient() }
        require(trainable.isNotEmpty()) { "DataParallel: no parameter requires a gradient, so there is nothing to average" }
        // Per dtype, in the block's order: a new bucket whenever the next parameter would overflow the cap.
        val groups = LinkedHashMap<DType, MutableList<MutableList<Pair<String, Parameter>>>>()
        val openBytes = HashMap<DType, Long>()
        for ((name, p) in trainable) {
            val array = p.array
            val dtype = array.dataType.toDType()
            require(dtype.isFloatingPoint) { "DataParallel: parameter '$name' is ${array.dataType}; gradients are averaged for floating-point parameters only" }
            val bytes = array.shape.size() * dtype.byteSize
            val lists = groups.getOrPut(dtype) { mutableListOf(mutableListOf()) }
            val used = openBytes[dtype] ?: 0L
            if (lists.last().isNotEmpty() && used + bytes > bucketCapBytes) {
                lists += mutableListOf(name to p)
                openBytes[dtype] = bytes
            } else {
                lists.last() += name to p
                openBytes[dtype] = used + bytes
            }
        }
        val made = ArrayList<GradientBucket>()
        val madeSlots = ArrayList<List<Slot>>()
        try {
            for ((dtype, lists) in groups) for (members in lists) {
                val bucket = GradientBucket(dtype, members.map { (_, p) -> p.array.shape.toTensorDims("DataParallel").toList() })
                made += bucket
                madeSlots += members.mapIndexed { i, (name, p) -> Slot(name, p, bucket.tensors[i].segment) }
            }
        } catch (e: Throwable) {
            made.forEach { it.close() }
            throw e
        }
        buckets = made
        slots = madeSlots
        parameterNames = slots.flatten().map { it.name }
        state = State(buckets)
        // The parameters' managers hold the buckets, whose memory the gradients will point at.
        managers = trainable.map { it.second.array.manager }.distinct()
        try {
            for (m in managers) m.attachInternal(keepAliveId, state)
        } catch (e: Throwable) {
            for (m in managers) runCatching { m.detachInternal(keepAliveId) }
            buckets.forEach { it.close() }
            throw e
        }
    }

    /**
     * Averages every trainable parameter's gradient across the ranks, in place ([ReduceOp.Avg]):
     * one all-reduce per bucket, all issued at once and in bucket order. Call it after backward and
     * before the optimizer step, at the same point on every rank. See the class documentation for
     * failures and cancellation.
     *
     * @throws IllegalStateException if this helper is closed, or a gradient cannot be made a view
     * of its bucket (no gradient on this rank this step, or not a PyTorch CPU array).
     */
    public suspend fun averageGradients() {
        checkOpen()
        for (list in slots) for (slot in list) slot.attach()
        coroutineScope {
            buckets.map { b -> async(start = CoroutineStart.UNDISPATCHED) { b.allReduce(communicator, ReduceOp.Avg) } }.awaitAll()
        }
    }

    /**
     * [averageGradients] for callers outside coroutines (Java): blocks the calling thread until
     * the gradients are averaged. Exceptions are thrown as they are, unwrapped. If the thread is
     * interrupted while waiting, the all-reduces are cancelled (which aborts the communicator) and
     * [InterruptedException] is thrown.
     */
    @Throws(InterruptedException::class)
    public fun averageGradientsBlocking(): Unit = runBlocking { averageGradients() }

    /**
     * Copies [root]'s values of every parameter of the block (trainable or not, e.g. batch-norm
     * statistics) to every rank, in place and without staging copies (each parameter's memory is
     * broadcast through [asTensor]): call it once after initialization so that every replica
     * starts from the same weights. One broadcast per parameter, in the block's order; failures are
     * those of [Communicator.broadcast].
     *
     * @throws IllegalStateException if this helper is closed.
     * @throws IllegalArgumentException if [root] is not a rank, or a parameter's array cannot be
     * viewed as a tensor (see [asTensor]).
     */
    public suspend fun broadcastParameters(root: Int = 0) {
        checkOpen()
        require(root in 0 until communicator.worldSize) { "broadcastParameters: root $root is not a rank of ${communicator.worldSize}; pass 0..${communicator.worldSize - 1}" }
        for ((_, p) in allParameters) communicator.broadcast(p.array.asTensor(), root)
    }

    /** [broadcastParameters] for callers outside coroutines (Java); blocks like [averageGradientsBlocking]. */
    @JvmOverloads
    @Throws(InterruptedException::class)
    public fun broadcastParametersBlocking(root: Int = 0): Unit = runBlocking { broadcastParameters(root) }

    /**
     * Gives each gradient memory of torch's own again (a copy of its current values, owned by its
     * parameter's manager), releases the buckets from the parameters' managers and frees them.
     * Idempotent. After the model is closed it only frees the buckets. Do not call it while
     * [averageGradients] runs.
     */
    override fun close() {
        if (!state.markClosed()) return
        if (!state.modelClosed) {
            for (list in slots) for (slot in list) slot.detach()
        }
        for (m in managers) runCatching { m.detachInternal(keepAliveId) }
        buckets.forEach { it.close() }
    }

    override fun toString(): String =
        "DataParallel(rank ${communicator.rank} of ${communicator.worldSize}, ${parameterNames.size} parameters in ${buckets.size} buckets)"

    private fun checkOpen() {
        check(!state.closed) { "DataParallel is closed" }
        check(!state.modelClosed) { "DataParallel: the model's parameters were closed (their manager was closed)" }
    }

    public companion object {
        /** The default [bucketCapBytes]: 25 MiB, as PyTorch DDP's `bucket_cap_mb`. */
        public const val DEFAULT_BUCKET_CAP_BYTES: Long = 25L shl 20
    }

    /** What the parameters' managers hold: the buckets, kept reachable until the model closes or [close] detaches it. */
    private class State(@Suppress("unused") val buckets: List<GradientBucket>) : AutoCloseable {
        @Volatile var closed = false
        @Volatile var modelClosed = false

        @Synchronized fun markClosed(): Boolean = if (closed) false else true.also { closed = true }

        /** The manager is closing: the parameters go with it. */
        override fun close() {
            modelClosed = true
        }
    }

    /** One trainable parameter and its slice of a bucket. */
    private class Slot(val name: String, val parameter: Parameter, val view: MemorySegment) {
        private val viewBuffer: ByteBuffer = view.asByteBuffer().order(ByteOrder.nativeOrder())

        /** Makes the parameter's gradient the bucket slice, copying its current values in if it is not yet. */
        fun attach() {
            if (view.byteSize() == 0L) return
            val array = parameter.array
            array.gradient.use { grad ->
                val current = grad.toByteBuffer(true)
                if (current.isDirect && MemorySegment.ofBuffer(current).address() == view.address()) return
                check(current.remaining().toLong() == view.byteSize()) {
                    "DataParallel: the gradient of parameter '$name' has ${current.remaining()} bytes, its bucket slice ${view.byteSize()}"
                }
                MemorySegment.copy(MemorySegment.ofBuffer(current), 0, view, 0, view.byteSize())
                grad.set(viewBuffer.duplicate().order(ByteOrder.nativeOrder()))
            }
            val now = array.gradient.use { directAddressOrNull(it) }
            check(now == view.address()) {
                "DataParallel: the gradient of parameter '$name' cannot be made a view of its bucket: either it has no gradient on this rank " +
                    "at this step (every trainable parameter must take part in forward and backward on every rank; freeze the others), " +
                    "or its array is not a PyTorch CPU array (engine ${array.manager.engine.engineName}, device ${array.device})"
            }
        }

        /** Points the gradient at a torch-owned copy of its values, so the bucket can be freed. */
        fun detach() {
            if (view.byteSize() == 0L) return
            val array = parameter.array ?: return
            if (array.isReleased) return
            runCatching {
                array.gradient.use { grad ->
                    if (directAddressOrNull(grad) != view.address()) return
                    val own = grad.duplicate() // torch's memory, attached to the parameter's manager
                    grad.set(own.toByteBuffer(true))
                }
            }
        }

        private fun directAddressOrNull(array: NDArray): Long? {
            val b = array.toByteBuffer(true)
            return if (b.isDirect) MemorySegment.ofBuffer(b).address() else null
        }
    }
}
