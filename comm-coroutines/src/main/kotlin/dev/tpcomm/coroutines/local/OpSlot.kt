package dev.tpcomm.coroutines.local

import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.engine.OperationFailure
import dev.tpcomm.spi.CollectiveSignature
import kotlinx.coroutines.CancellableContinuation
import kotlinx.coroutines.suspendCancellableCoroutine
import java.lang.foreign.MemorySegment
import java.util.concurrent.ConcurrentLinkedQueue
import java.util.concurrent.atomic.AtomicInteger
import java.util.concurrent.atomic.AtomicReferenceArray
import kotlin.coroutines.Continuation
import kotlin.coroutines.intrinsics.intercepted
import kotlin.coroutines.resume

/**
 * The meeting place of one collective: operation number [seq] of every rank of a group arrives here.
 *
 * Each arriving rank writes its signature and tensors into its own index of the arrays, then
 * increments [arrived]. The rank that brings the count to the group size (the last arriver) checks
 * the signatures, moves the data, sets [state] to [DONE] and wakes the others; a failure (mismatch,
 * abort, timeout) sets [FAILED] with a [failure] instead. Slots are reused: once every rank has
 * [depart]ed, the slot is cleared and serves operation `seq + ring size` (a new generation), so the
 * steady state allocates nothing.
 */
internal class OpSlot(private val size: Int, initialSeq: Long, private val ringSize: Int) {
    /** The operation number this slot currently serves. */
    @Volatile @JvmField var seq: Long = initialSeq

    @JvmField val state = AtomicInteger(PENDING)
    @JvmField val arrived = AtomicInteger()
    private val departed = AtomicInteger()
    @Volatile @JvmField var failure: OperationFailure? = null

    // Per-rank signature and arguments, written by each rank before it increments [arrived].
    @JvmField val present = BooleanArray(size)
    @JvmField val kinds = IntArray(size)
    @JvmField val ops = arrayOfNulls<ReduceOp>(size)
    @JvmField val roots = IntArray(size)
    @JvmField val dims = IntArray(size)
    @JvmField val extras = arrayOfNulls<Any>(size)

    /** Per-rank signatures in the core's one encoding ([CollectiveSignature]), rank r at `r * SIZE`. */
    @JvmField val signatures = LongArray(size * CollectiveSignature.SIZE)
    @JvmField val inputs = arrayOfNulls<Tensor>(size)
    @JvmField val outputs = arrayOfNulls<Tensor>(size)
    @JvmField val recorderSeqs = LongArray(size)

    /** Per-rank results of split/group (the new communicator or null). */
    @JvmField val results = arrayOfNulls<Any>(size)

    /** Per rank: its cancellation handler for waits in this slot, made at its first wait and kept across generations. */
    @JvmField val cancelHandlers = arrayOfNulls<LocalBackend.CancelledWait>(size)

    /** Per rank: null (not waiting yet), a suspended continuation, or [WOKEN]. */
    @JvmField val waiters = AtomicReferenceArray<Any?>(size)

    // Scratch arrays for the kernels, reused by every generation.
    @JvmField val inSegs = arrayOfNulls<MemorySegment>(size)
    @JvmField val outSegs = arrayOfNulls<MemorySegment>(size)
    @JvmField val singleOuts: Array<Array<MemorySegment?>> = Array(size) { arrayOfNulls<MemorySegment>(1) }

    /** [ReduceOp.PreMulSum]'s factors, rank r's (in the dtype) at r, filled by [preMulFactors]. */
    @JvmField val factors = DoubleArray(size)

    /**
     * Null unless this collective's op is [ReduceOp.PreMulSum]; then [factors] filled with each rank's
     * own factor rounded to [dtype] (ranks may pass different factors: only the op kind is in the
     * signature). Run by the executing rank once every rank arrived.
     */
    fun preMulFactors(w: Int, dtype: dev.tpcomm.DType): DoubleArray? {
        if (ops[0] !is ReduceOp.PreMulSum) return null
        for (r in 0 until w) factors[r] = (ops[r] as ReduceOp.PreMulSum).factorIn(dtype)
        return factors
    }

    val isFinal: Boolean get() = state.get() >= DONE

    /** Fails this slot with [f] unless the data movement already started or it already failed; wakes every waiter. */
    fun fail(f: OperationFailure): Boolean {
        if (!state.compareAndSet(PENDING, FAILING)) return false
        failure = f
        state.set(FAILED)
        wake(-1)
        return true
    }

    /** Fails this slot after its data movement started and failed; wakes every waiter. */
    fun failRunning(f: OperationFailure) {
        failure = f
        state.set(FAILED)
        wake(-1)
    }

    /** Marks the data movement done and wakes every rank but [self]. */
    fun complete(self: Int) {
        state.set(DONE)
        wake(self)
    }

    @Suppress("UNCHECKED_CAST")
    private fun wake(self: Int) {
        for (r in 0 until size) {
            if (r == self) continue
            val prev = waiters.getAndSet(r, WOKEN)
            if (prev is Continuation<*>) (prev as Continuation<Unit>).intercepted().resume(Unit)
        }
    }

    /**
     * Ranks whose next operation is this slot's next generation (they ran a ring ahead), each
     * waiting in [awaitGeneration] until [depart] recycles the slot or [wakeGenerationWaiters] (an
     * abort) wakes them. Rarely used, so allocated per wait.
     */
    private val generationWaiters = ConcurrentLinkedQueue<CancellableContinuation<Unit>>()

    /**
     * Suspends until this slot serves operation [wanted] or [abandoned] is true (the group aborted);
     * returns at once when one holds already. Cancellable. The caller checks again after it returns.
     */
    suspend fun awaitGeneration(wanted: Long, abandoned: () -> Boolean) {
        if (seq == wanted || abandoned()) return
        suspendCancellableCoroutine { cont ->
            generationWaiters.add(cont)
            cont.invokeOnCancellation { generationWaiters.remove(cont) }
            // Recycled (or aborted) between the check and the add: whoever removes it resumes it.
            if ((seq == wanted || abandoned()) && generationWaiters.remove(cont)) cont.resume(Unit)
        }
    }

    /** Wakes every rank waiting in [awaitGeneration] (after a recycle, or an abort). */
    fun wakeGenerationWaiters() {
        while (true) generationWaiters.poll()?.resume(Unit) ?: return
    }

    /** Called by every rank once it no longer reads the slot; the last one recycles it for the next generation. */
    fun depart() {
        if (departed.incrementAndGet() != size) return
        val next = seq + ringSize
        for (r in 0 until size) {
            present[r] = false
            ops[r] = null; extras[r] = null
            inputs[r] = null; outputs[r] = null; results[r] = null
            inSegs[r] = null; outSegs[r] = null; singleOuts[r][0] = null
            waiters.set(r, null)
        }
        failure = null
        arrived.set(0)
        departed.set(0)
        state.set(PENDING)
        seq = next // publishes the cleared slot
        if (!generationWaiters.isEmpty()) wakeGenerationWaiters()
    }

    companion object {
        const val PENDING = 0
        const val RUNNING = 1
        const val FAILING = 2
        const val DONE = 3
        const val FAILED = 4

        @JvmField val WOKEN = Any()
    }
}

/**
 * Why a slot failed. [kind] picks the exception each rank throws: [MISMATCH] gives
 * CollectiveMismatchException, [TIMEOUT] CommunicationTimeoutException, [ABORTED]
 * CommunicatorAbortedException (with [cause]).
 */
