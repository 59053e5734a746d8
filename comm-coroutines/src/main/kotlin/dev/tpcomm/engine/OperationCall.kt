package dev.tpcomm.engine

import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.coroutines.Overlapping
import dev.tpcomm.spi.CollectiveOp
import dev.tpcomm.spi.CollectiveSignature

/** Where allToAllV's signature keeps the row's dim 0, which is each rank's own (set to -1). */
private const val ROW_DIM0 = 8

/**
 * One issued collective: what the backend needs to run it. [sequence] counts this
 * communicator's collectives from 1 (the same number on every rank for the same call);
 * [entry] is its flight record. [state] is the backend's own (set in [CommunicatorBackend.allocate] or [CommunicatorBackend.issue], read in [CommunicatorBackend.await]).
 */
@InternalTpcommApi
public class OperationCall internal constructor(
    /** The operation. */
    @JvmField public val op: CollectiveOp,
    /** The flight record ([FlightRecorder.Entry.sequence] is the number exceptions report). */
    @JvmField public val entry: FlightRecorder.Entry,
    /** The collective's number, from 1. */
    @JvmField public val sequence: Long,
    /** The tensor the data comes from (null where the call has none on this rank). */
    @JvmField public val input: Tensor?,
    output: Tensor?,
    /** The tensor whose dtype and shape are the call's signature. */
    @JvmField public val signatureTensor: Tensor?,
    /** The reduction, or null. */
    @JvmField public val reduceOp: ReduceOp?,
    /** The root, or -1. */
    @JvmField public val root: Int,
    /** The normalised dimension (0 where the operation has none). */
    @JvmField public val dim: Int,
    /** The uneven collectives' per-rank sizes (allToAllV: the input splits), or null. */
    @JvmField public val sizes: List<Int>?,
    /** allToAllV's output splits, or null. */
    @JvmField public val outputSizes: List<Int>?,
    /** split: `[has color, color, key]`; group: the ranks; null otherwise. */
    @JvmField public val extra: Any?,
    /**
     * The operation the user called: [op] itself, or the composite operation (an object
     * collective, say) this call is step [step] of. Names the call and goes into its signature.
     */
    @JvmField public val signatureOp: CollectiveOp = op,
    /** The step's index within its composite operation, from 1 (0: not a step). */
    @JvmField public val step: Int = 0,
    /**
     * The reduce op of a reproducible reduction this call is (a step of, or the backend's own exact
     * reduction, [ReproducibleReductions.Direct]), or null: its signature's `op` word is
     * [CollectiveSignature.reproducibleOpWord] of it.
     */
    @JvmField internal val reproducibleOp: ReduceOp? = null,
) {
    /**
     * The tensor the result goes to (the input for in-place calls; null where none). For an
     * allocating collective, set by the front once [CommunicatorBackend.allocate] returned it, before [CommunicatorBackend.issue].
     */
    public var output: Tensor? = output
        internal set

    /** The backend's own state of this call (set from [CommunicatorBackend.allocate] or [CommunicatorBackend.issue] on). */
    @JvmField public var state: Any? = null

    /** Whether the front retained [output] besides the input (not null, not the input): what [CommunicatorFront.releaseHandedOver] releases. */
    @JvmField internal var heldOutput: Boolean = false

    /** The caller's coroutine context (its `withTimeout`, its `Overlapping` marker, its job). */
    @JvmField public var context: kotlin.coroutines.CoroutineContext = kotlin.coroutines.EmptyCoroutineContext

    /** The name users and the flight recorder see (a composite's steps: the composite's). */
    public val name: String get() = signatureOp.apiName

    /**
     * Writes this call's signature ([CollectiveSignature.SIZE] longs) into [dst] at [at]: the
     * operation, dtype, reduction kind, root, dimension and shape; the uneven collectives encode
     * what is the same on every rank (allGatherV's output shape, reduceScatterV's input shape,
     * allToAllV's row with dim 0 as -1) and the sizes' digest; for allToAllV the backend sets the
     * extra word with [CommunicatorFront.setSplitsWord] once it knows what its peers send it.
     */
    public fun encodeSignature(dst: LongArray, at: Int) {
        if (step != 0) {
            // A composite's step: the composite's operation, its tensor when it has one (an object operation's lengths differ per call), the step's index.
            CollectiveSignature.encode(dst, at, signatureOp, if (signatureOp.hasTensor) signatureTensor else null, null, root = if (signatureOp.hasRoot) root else -1, extra = step.toLong())
            if (reproducibleOp != null) dst[at + 3] = CollectiveSignature.reproducibleOpWord(reproducibleOp)
            return
        }
        when (op) {
            CollectiveOp.AllGatherV -> CollectiveSignature.encodeShape(
                dst, at, op, input!!.dtype, output!!.shape, extra = CollectiveSignature.sizesDigest(sizes!!),
            )
            CollectiveOp.ReduceScatterV -> CollectiveSignature.encodeShape(
                dst, at, op, input!!.dtype, input.shape, reduceOp, extra = CollectiveSignature.sizesDigest(sizes!!),
            )
            CollectiveOp.AllToAllV -> {
                CollectiveSignature.encode(dst, at, op, input)
                dst[at + ROW_DIM0] = -1L // dim 0 is each rank's own
            }
            else -> CollectiveSignature.encode(
                dst, at, op, signatureTensor, reduceOp,
                root = if (op.hasRoot) root else -1,
                dim = if (op.hasDim) dim else -1,
                extra = if (op == CollectiveOp.Group) extra.hashCode().toLong() else 0L,
            )
        }
        if (reproducibleOp != null) dst[at + 3] = CollectiveSignature.reproducibleOpWord(reproducibleOp)
    }
}
