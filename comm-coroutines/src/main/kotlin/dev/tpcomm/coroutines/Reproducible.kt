package dev.tpcomm.coroutines

import dev.tpcomm.Communicator
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.engine.CommunicatorFront
import dev.tpcomm.engine.frontOrNull
import dev.tpcomm.engine.ReproducibleReductions
import dev.tpcomm.spi.CollectiveValidator
import kotlin.coroutines.AbstractCoroutineContextElement
import kotlin.coroutines.CoroutineContext

/**
 * Selects the **reproducible reductions** (docs/reproducible.md) for the calls made in a coroutine
 * context: `withContext(Reproducible.On) { comm.allReduce(grad) }` makes every floating-point
 * `Sum`, `Avg` and `PreMulSum` reduction in the block (`allReduce`, `reduce`, `reduceScatter`,
 * `reduceScatterV`, their `Into` forms, and the fused and bucketed paths built on them) return
 * the correctly rounded result of the exact sum: the same bits for any world size, rank order,
 * backend, algorithm and split of the tensor. [Off] selects the default reductions in a block of a
 * communicator created with `CommConfig(reproducibleReductions = true)`. The element overrides
 * the communicator's setting; without one, the communicator's setting holds.
 *
 * For one call, [reproducible] reads better: `comm.reproducible().allReduce(grad)`.
 */
public class Reproducible private constructor(
    /** Whether the reductions in the context are reproducible. */
    public val enabled: Boolean,
) : AbstractCoroutineContextElement(Key) {
    /** The context key, and the two modes. */
    public companion object Key : CoroutineContext.Key<Reproducible> {
        /** Reproducible reductions in the context. */
        @JvmField public val On: Reproducible = Reproducible(true)

        /** The default reductions in the context, whatever the communicator's setting. */
        @JvmField public val Off: Reproducible = Reproducible(false)
    }

    override fun toString(): String = if (enabled) "Reproducible.On" else "Reproducible.Off"
}

/**
 * This communicator with its reductions reproducible ([enabled], the default) or default
 * ([enabled] false): a view whose `allReduce`, `reduce`, `reduceScatter`, `reduceScatterV` and
 * their `Into` forms run under [Reproducible]; every other operation, and [Communicator.close], are
 * the communicator's own (the view is the same communicator: closing it closes the communicator).
 * Cheap: make one per call or keep it. `comm.reproducible().allReduce(grad)`; fused and bucketed
 * paths take the view like any communicator (`comm.reproducible().allReduceCoalesced(grads)`).
 */
public fun Communicator.reproducible(enabled: Boolean = true): Communicator {
    val base = if (this is ReproducibleCommunicator) base else this
    return ReproducibleCommunicator(base, if (enabled) Reproducible.On else Reproducible.Off)
}

/**
 * [reproducible]'s view. Over a [CommunicatorFront] (every communicator tpcomm makes, or a
 * backend's handle on one) it passes [mode] to the front's reductions with each call (no coroutine
 * context switch) and the front composes them; over another [Communicator] it composes the
 * reproducible reductions itself from that communicator's own collectives (checking the arguments
 * as the interface's defaults do), so a third party's backend gets them too.
 */
private class ReproducibleCommunicator(val base: Communicator, val mode: Reproducible) : Communicator by base {
    private val front = base.frontOrNull
    private val checks by lazy { CollectiveValidator(base.worldSize, base.device, nativeMemory = false) }

    /** Whether a call on a communicator other than a front is composed here. */
    private fun own(dtype: dev.tpcomm.DType, op: ReduceOp) = front == null && mode.enabled && ReproducibleReductions.applies(dtype, op)

    override suspend fun allReduce(tensor: Tensor, op: ReduceOp): Tensor = when {
        front != null -> front.allReduce(tensor, op, mode.enabled)
        own(tensor.dtype, op) -> { checks.allReduce(tensor, op); ReproducibleReductions.allReduce(base, tensor, op) }
        else -> base.allReduce(tensor, op)
    }

    override suspend fun reduce(tensor: Tensor, root: Int, op: ReduceOp): Tensor = when {
        front != null -> front.reduce(tensor, root, op, mode.enabled)
        own(tensor.dtype, op) -> { checks.reduce(tensor, root, op); ReproducibleReductions.reduce(base, tensor, root, op) }
        else -> base.reduce(tensor, root, op)
    }

    override suspend fun reduceScatter(input: Tensor, op: ReduceOp, dim: Int): Tensor = when {
        front != null -> front.reduceScatter(input, op, dim, mode.enabled)
        own(input.dtype, op) -> {
            val shape = checks.reduceScatterShape(input, op, dim)
            ReproducibleReductions.reduceScatter(base, Tensor.zeros(input.dtype, shape), input, op, CollectiveValidator.normalise(input, dim))
        }
        else -> base.reduceScatter(input, op, dim)
    }

    override suspend fun reduceScatterInto(output: Tensor, input: Tensor, op: ReduceOp, dim: Int): Tensor = when {
        front != null -> front.reduceScatterInto(output, input, op, dim, mode.enabled)
        own(input.dtype, op) -> ReproducibleReductions.reduceScatter(base, output, input, op, checks.reduceScatterInto(output, input, op, dim))
        else -> base.reduceScatterInto(output, input, op, dim)
    }

    override suspend fun reduceScatterV(input: Tensor, sizes: List<Int>, op: ReduceOp): Tensor = when {
        front != null -> front.reduceScatterV(input, sizes, op, mode.enabled)
        own(input.dtype, op) -> {
            val shape = checks.reduceScatterVShape(input, sizes, op, base.rank)
            ReproducibleReductions.reduceScatterV(base, Tensor.zeros(input.dtype, shape), input, sizes, op)
        }
        else -> base.reduceScatterV(input, sizes, op)
    }

    override suspend fun reduceScatterVInto(output: Tensor, input: Tensor, sizes: List<Int>, op: ReduceOp): Tensor = when {
        front != null -> front.reduceScatterVInto(output, input, sizes, op, mode.enabled)
        own(input.dtype, op) -> { checks.reduceScatterVInto(output, input, sizes, op, base.rank); ReproducibleReductions.reduceScatterV(base, output, input, sizes, op) }
        else -> base.reduceScatterVInto(output, input, sizes, op)
    }

    override fun toString(): String = "$base ($mode)"
}
