package dev.tpcomm.spi

import dev.tpcomm.Tensor

/**
 * Output shapes of the shape-changing collectives, for backend implementers and callers that
 * preallocate for the `*Into` variants. Pure functions; thread-safe.
 */
public object CollectiveShapes {
    /** Shape of [Communicator.allGather][dev.tpcomm.Communicator.allGather]'s output: [input]'s with `dim` multiplied by [worldSize]. */
    @JvmStatic
    public fun allGather(input: Tensor, worldSize: Int, dim: Int): List<Int> {
        CollectiveChecks.dim(input, dim, "allGather")
        return gathered(input, if (dim < 0) dim + input.ndim else dim, worldSize, "allGather")
    }

    /** Shape of reduce-scatter's output: [input]'s with `dim` divided by [worldSize] (which must divide it). */
    @JvmStatic
    public fun reduceScatter(input: Tensor, worldSize: Int, dim: Int): List<Int> {
        CollectiveChecks.dim(input, dim, "reduceScatter")
        val d = if (dim < 0) dim + input.ndim else dim
        CollectiveChecks.divisible(input, d, worldSize, "reduceScatter")
        return input.shape.toMutableList().also { it[d] = it[d] / worldSize }
    }

    /**
     * [input]'s shape with the normalised dim [d] multiplied by [worldSize], refused with a message
     * naming [operation] when that size no longer fits a dimension (an `Int`).
     */
    internal fun gathered(input: Tensor, d: Int, worldSize: Int, operation: String): List<Int> {
        val size = input.shape[d].toLong() * worldSize
        require(size <= Int.MAX_VALUE) {
            "$operation: dim $d would have ${input.shape[d]} x $worldSize = $size elements, more than a dimension holds (${Int.MAX_VALUE}); " +
                "gather along another dim or split the tensor"
        }
        return input.shape.toMutableList().also { it[d] = size.toInt() }
    }
}
