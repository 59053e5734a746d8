package dev.tpcomm.coroutines

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor

/**
 * A persistent fusion buffer whose slices are the tensors a framework computes into: PyTorch
 * DDP's "gradient as bucket view". One flat host [buffer] holds every tensor of [shapes], in
 * order; [tensors] are views of it (made with [Tensor.split] and [Tensor.view], no copies), so
 * writing a gradient into `tensors[i]` writes the bucket, and [allReduce] reduces all of them with
 * one collective over the buffer and nothing packed or unpacked. Keep the bucket between steps:
 * the buffer is allocated once.
 *
 * Lifetime: the views share the buffer's memory and keep it alive; [close] closes the buffer and
 * with it every view (an all-reduce in flight defers the free until it completes, as for any
 * tensor). Every rank must build its bucket with the same dtype and shapes, in the same order, and
 * call [allReduce] in the same order as its other collectives.
 *
 * Thread-safety: as [Tensor]'s; do not write the views while [allReduce] runs.
 *
 * @throws IllegalArgumentException if [shapes] is empty, a shape has a negative size, or the
 * bucket would hold more than [Int.MAX_VALUE] elements (split it into several buckets).
 */
public class GradientBucket(
    /** Element type of every tensor in the bucket. */
    public val dtype: DType,
    shapes: List<List<Int>>,
) : AutoCloseable {
    /** The shapes of [tensors], in order. */
    public val shapes: List<List<Int>> = shapes.map { it.toList() }

    /** The flat buffer holding every tensor, in order: what [allReduce] reduces. */
    public val buffer: Tensor

    /** One view of [buffer] per shape, in order: compute the gradients into these. */
    public val tensors: List<Tensor>

    init {
        require(shapes.isNotEmpty()) { "GradientBucket needs at least one shape" }
        val numels = this.shapes.mapIndexed { i, s ->
            require(s.all { it >= 0 }) { "GradientBucket: shape $i $s has a negative size" }
            s.fold(1L) { acc, d -> acc * d }
        }
        val total = numels.sumOf { it }
        require(total <= Int.MAX_VALUE) {
            "GradientBucket: the shapes hold $total elements, more than one tensor can (${Int.MAX_VALUE}); split them into several buckets"
        }
        buffer = Tensor.zeros(dtype, total.toInt())
        tensors = buffer.split(numels.map { it.toInt() }).mapIndexed { i, flat -> flat.view(*this.shapes[i].toIntArray()) }
    }

    /**
     * All-reduces the whole bucket in place with one collective ([Communicator.allReduce] of
     * [buffer] with [op]; [ReduceOp.Avg] averages gradients). Returns this bucket. Failures are
     * those of [Communicator.allReduce].
     */
    public suspend fun allReduce(comm: Communicator, op: ReduceOp = ReduceOp.Sum): GradientBucket {
        comm.allReduce(buffer, op)
        return this
    }

    /** Sets every element of the bucket to zero (between steps, as `optimizer.zero_grad()`). */
    public fun zero(): GradientBucket {
        buffer.segment.fill(0)
        return this
    }

    /** Closes the buffer and every view of it (deferred while an all-reduce is in flight). Idempotent. */
    override fun close(): Unit = buffer.close()

    override fun toString(): String = "GradientBucket($dtype, ${shapes.size} tensors, ${buffer.numel} elements)"
}
