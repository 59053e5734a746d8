package dev.tpcomm.coroutines

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.coroutines.local.LocalGroup
import dev.tpcomm.coroutines.local.LocalWorldState

/**
 * An in-process world of [worldSize] ranks whose communicators ("local" backend) are used from
 * coroutines or threads of this JVM: the ranks' tensors are reduced and copied directly, without
 * serialization or staging copies.
 *
 * Get each rank's communicator with [communicator] and drive each from its own coroutine (or
 * thread); every rank must call the same collectives in the same order, as in any backend.
 * Collectives follow all the semantics of [Communicator]: issue order is call order, every call
 * has the deadline [CommConfig.timeout], and a missed deadline, a mismatch or a cancelled in-flight
 * call aborts the communicator it happened on, so every pending and later call on it, on every
 * rank, fails with a `CommunicationException` instead of hanging.
 *
 * Communicators fail one at a time, as under MPI and on NCCL: a failure of a communicator made by
 * `split` or `group` aborts that communicator alone; the communicator it was split from, its
 * siblings and the communicators split from it stay usable (each with its own deadlines, so none
 * can hang on the failed one). [abort], [close] and a rank's exception under `runLocalWorld`
 * (the in-process analogue of a process of the job failing) end every communicator of the world.
 *
 * Point-to-point behaves like MPI's: a `send` of at most the eager limit (256 bytes,
 * [dev.tpcomm.coroutines.local.LocalBackendFactory.DEFAULT_EAGER_LIMIT]; the option `local.eagerLimit`,
 * [dev.tpcomm.coroutines.local.LocalBackendFactory.EAGER_LIMIT_OPTION], changes it), or a send to
 * the same rank at any size, is buffered: it copies straight into a matching receive already posted
 * (no staging copy), or else into a private buffer queued for the receiver, and returns without
 * waiting. A larger send to another rank is a rendezvous, as MPI's is above its eager limit: it
 * returns only once the receiver has posted a matching receive and the data was copied. So an
 * exchange where every rank sends, then receives (a ring) deadlocks above 256 bytes here as it
 * would under `mpirun`, and ends at the timeout in a `CommunicationTimeoutException` that names the
 * limit; launch the send beside the receive, or use `sendRecv`. Messages of one (source, tag) pair
 * are received in the order sent; `ANY_SOURCE`/`ANY_TAG` take the oldest matching message. A
 * receive whose buffer size differs from the message's throws a plain `CommunicationException` on
 * the receiver, saying both sizes, worded as on the MPI backend (no rank's own arguments show the
 * mistake, so it is not an `IllegalArgumentException`); the message stays queued for a receive of
 * the right size (`probe` tells it), the communicator stays usable, a buffered sender, already
 * returned, sees nothing, and a waiting one keeps waiting. A receive, probe or waiting send past the
 * timeout aborts its communicator; cancelling a waiting receive, probe or send (a caller's
 * `withTimeout`) only withdraws it (nothing is in flight), it does not abort anything.
 *
 * Deadlines: each rank's calls are timed from the call by the core's watchdog thread, every tenth
 * of [CommConfig.timeout] (between 2 and 50 ms): a call past its deadline aborts its communicator
 * with a `CommunicationTimeoutException` naming the ranks that never arrived (or the message a
 * receive waited for), which every waiting rank gets.
 *
 * Cancellation: a coroutine cancelled while it waits in a collective aborts its communicator at
 * once, inside its `cancel()` call: the collective's data movement never starts, every other rank's
 * pending and later calls on that communicator fail with `CommunicatorAbortedException` naming the cancellation, and
 * no tensor of the cancelled rank is written after `cancel()` returns (a data movement already
 * running when `cancel()` is called is finished first, and the call then returns its result).
 * The cancelled call throws `CancellationException`, or `CommunicationTimeoutException` when the
 * cancellation is the deadline of an enclosing `withTimeout`, so that
 * `withTimeout(d) { comm.allReduce(t) }` raises `CommunicationTimeoutException` at `d`.
 *
 * Every exception carries the rank's flight recorder as JSON (`flightRecorderDump`). The recorder
 * reads no clock per call (start times to the watchdog's 50 ms, no duration for a call that
 * completed) unless the option `local.timing=true`
 * ([dev.tpcomm.coroutines.local.LocalBackendFactory.TIMING_OPTION]) asks for exact times.
 *
 * Memory: the world refuses what every backend refuses, so a test that passes here does not fail
 * under `mpirun` or on a GPU. A host tensor over a Java heap array (`MemorySegment.ofArray`, a heap
 * `ByteBuffer` such as a copy of `NDArray.toByteBuffer()`) fails before any data moves with the
 * `IllegalArgumentException` MPI gives, word for word; so do closed and (where written) read-only
 * tensors. A program that only ever runs in-process may accept heap tensors with the option
 * `local.allowHeapMemory=true` in [CommConfig.options]
 * ([dev.tpcomm.coroutines.local.LocalBackendFactory.ALLOW_HEAP_MEMORY_OPTION]).
 *
 * Thread-safe; nothing assumes the ranks share a thread or a dispatcher. Thread-safe is not
 * ordered across ranks: a rank's collectives are paired with its peers' by the order in which they
 * reach its communicator, so calls from several threads of one rank pair with the peers' calls in
 * whatever order those threads happened to issue them, and same-shape calls then pair with the
 * wrong partner silently (no mismatch to detect). Issue each communicator's calls from one thread
 * or coroutine, or in an explicit order that every rank follows. Big reductions and
 * copies run in parallel pieces on the calling thread together with `min(8, availableProcessors) - 1` helper
 * threads (`tpcomm-local-kernel-N`, daemon; they spin up to 200 µs between kernels so back-to-back
 * collectives find them awake, then park). Float32, Float64, Int32 and Int64 reductions use the
 * Vector API when the JVM runs with `--add-modules=jdk.incubator.vector` (about 4x faster on data
 * in cache), scalar loops otherwise.
 *
 * [config]'s `worldSize` and `rank` are ignored ([worldSize] is used); its timeout,
 * flight-recorder size and options apply. [close] closes every rank's communicator.
 *
 * @throws IllegalArgumentException from the constructor when [worldSize] < 1, the option
 * `local.allowHeapMemory` or `local.timing` is neither `true` nor `false`, or `local.eagerLimit` is
 * not a whole number of bytes.
 */
public class LocalWorld(
    /** Number of ranks (>= 1). */
    public val worldSize: Int,
    /** Timeout, flight-recorder size and options of every communicator of this world. */
    public val config: CommConfig = CommConfig(),
) : AutoCloseable {
    private val state: LocalWorldState
    private val root: LocalGroup

    init {
        require(worldSize >= 1) { "LocalWorld: worldSize must be >= 1, got $worldSize" }
        state = LocalWorldState(config)
        root = LocalGroup(state, worldSize, "local world of $worldSize")
        state.rootGroup = root
    }

    /** Rank [rank]'s communicator; the same instance on every call. */
    public fun communicator(rank: Int): Communicator {
        require(rank in 0 until worldSize) { "LocalWorld.communicator: rank $rank is out of range; pass a rank in 0 until $worldSize" }
        return root.communicators[rank]
    }

    /** Every rank's communicator, in rank order. */
    public val communicators: List<Communicator> get() = root.communicators.toList()

    /**
     * True once the world's own communicators failed, or the world was aborted or closed. A failure
     * of a communicator split from the world does not count: it leaves the world's usable.
     */
    public val isAborted: Boolean get() = state.abortCause != null

    /** The first failure of the world's own communicators (or of the whole world), or null while they are usable. */
    public val abortCause: Throwable? get() = state.abortCause

    /**
     * Aborts the world: every pending and later call on every rank (of this world and of the
     * communicators split from it) fails with a `CommunicationException` whose cause is [cause].
     * Idempotent: the first cause wins.
     */
    public fun abort(cause: Throwable) {
        state.abort(cause)
    }

    /**
     * Closes every communicator of the world and of its sub-groups. Pending calls fail; later calls
     * throw [CommunicatorAbortedException]. Idempotent.
     */
    override fun close() {
        state.close(state.errors.aborted("close", -1, "the local world was closed"))
    }

    override fun toString(): String = "LocalWorld(worldSize=$worldSize)"
}
