package dev.tpcomm.coroutines

import dev.tpcomm.Communicator

/**
 * The ranks of a communicator laid out as an n-dimensional mesh, with one sub-communicator per
 * mesh dimension (as `torch.distributed.init_device_mesh` gives), so data-parallel and
 * tensor-parallel groups come from one call:
 *
 * ```
 * val mesh = DeviceMesh(world, shape = listOf(dp, tp), names = listOf("dp", "tp"))
 * mesh["tp"].allReduce(partial)      // among the tp ranks of this rank's data-parallel replica
 * mesh["dp"].allReduce(gradient)     // among the replicas holding the same tensor-parallel shard
 * ```
 *
 * **Layout.** World ranks fill the mesh in row-major order (the last dimension varies fastest):
 * rank `r` has the [coordinates] of `r` in [shape]. For `shape = [dp, tp]` the tp groups are runs
 * of `tp` consecutive ranks (Megatron-LM's layout) and the dp groups are ranks equal modulo `tp`.
 * The communicator of dimension `d` holds the ranks that share every coordinate except `d`; its
 * rank is this rank's coordinate along `d`.
 *
 * **Construction** is collective: every rank of `comm` calls `DeviceMesh(comm, shape, names)` with
 * the same shape and names; it runs one [Communicator.split] per dimension, in dimension order.
 * Bad arguments throw [IllegalArgumentException] before any split.
 *
 * The mesh owns the sub-communicators: [close] closes them (not the parent). Thread-safe for
 * reading; the sub-communicators follow the [Communicator] contract.
 */
public class DeviceMesh private constructor(
    /** The communicator the mesh was built from (not owned). */
    public val parent: Communicator,
    dims: IntArray,
    dimNames: Array<String>,
    private val communicators: List<Communicator>,
) : AutoCloseable {
    /** Size of each mesh dimension, outermost first; the product is the parent's world size. */
    public val shape: List<Int> = dims.toList()

    /** Name of each mesh dimension, in the order of [shape]. */
    public val names: List<String> = dimNames.toList()

    /** This rank's coordinate along each dimension, in the order of [shape]. */
    public val coordinates: List<Int> = unravel(parent.rank, dims)

    /** Number of dimensions. */
    public val ndim: Int get() = shape.size

    /** The sub-communicator of the dimension called [name]; same as [communicator]. */
    public operator fun get(name: String): Communicator = communicator(name)

    /**
     * The sub-communicator of the dimension called [name]: the ranks sharing every coordinate of
     * this rank except the one along [name].
     *
     * @throws IllegalArgumentException if no dimension has that name.
     */
    public fun communicator(name: String): Communicator = communicators[indexOf(name)]

    /** The sub-communicator of dimension [dim] (0-based, in the order of [shape]). */
    public fun communicator(dim: Int): Communicator {
        require(dim in shape.indices) { "DeviceMesh: dimension $dim is out of range; the mesh has dimensions 0 until $ndim ($names)" }
        return communicators[dim]
    }

    /** This rank's coordinate along the dimension called [name]. */
    public fun coordinate(name: String): Int = coordinates[indexOf(name)]

    /** Size of the dimension called [name]. */
    public fun size(name: String): Int = shape[indexOf(name)]

    /** The parent ranks, in sub-communicator rank order, that share [name]'s communicator with this rank. */
    public fun ranksAlong(name: String): List<Int> {
        val d = indexOf(name)
        val coords = coordinates.toMutableList()
        return List(shape[d]) { i -> coords[d] = i; ravel(coords, shape) }
    }

    /** Closes every sub-communicator the mesh created (not [parent]). Idempotent. */
    override fun close() {
        var first: Throwable? = null
        for (c in communicators) {
            try {
                c.close()
            } catch (e: Throwable) {
                if (first == null) first = e else first.addSuppressed(e)
            }
        }
        first?.let { throw it }
    }

    override fun toString(): String =
        "DeviceMesh(${names.zip(shape).joinToString { (n, s) -> "$n=$s" }}, rank ${parent.rank} at $coordinates)"

    private fun indexOf(name: String): Int {
        val d = names.indexOf(name)
        require(d >= 0) { "DeviceMesh: no dimension named '$name'; the dimensions are $names" }
        return d
    }

    public companion object {
        /**
         * Builds the mesh of [comm]'s ranks with dimension sizes [shape] and names [names].
         * Collective: every rank of [comm] must call it with the same arguments.
         *
         * On failure of a split the sub-communicators already created are closed and the failure
         * is thrown ([comm] is then aborted, as any failed collective aborts it).
         *
         * @throws IllegalArgumentException if [shape] is empty, has a size < 1, does not multiply
         * to [Communicator.worldSize], or [names] is not one distinct non-blank name per dimension.
         */
        public suspend operator fun invoke(comm: Communicator, shape: List<Int>, names: List<String>): DeviceMesh {
            require(shape.isNotEmpty()) { "DeviceMesh: shape must have at least one dimension" }
            require(shape.all { it >= 1 }) { "DeviceMesh: every dimension size must be >= 1, got $shape" }
            require(names.size == shape.size) {
                "DeviceMesh: ${names.size} names $names for ${shape.size} dimensions $shape; pass one name per dimension"
            }
            require(names.all { it.isNotBlank() }) { "DeviceMesh: dimension names must not be blank, got $names" }
            require(names.toSet().size == names.size) { "DeviceMesh: dimension names $names contain duplicates; pass distinct names" }
            val product = shape.fold(1L) { acc, s -> acc * s }
            require(product == comm.worldSize.toLong()) {
                "DeviceMesh: shape $shape holds $product ranks but the communicator has ${comm.worldSize}; " +
                    "pass a shape whose sizes multiply to ${comm.worldSize}"
            }
            val dims = shape.toIntArray()
            val coords = unravel(comm.rank, dims)
            val created = ArrayList<Communicator>(dims.size)
            try {
                for (d in dims.indices) {
                    // Color: this rank's position with dimension d removed; key: its coordinate along d.
                    val others = coords.toMutableList().also { it[d] = 0 }
                    val color = ravel(others, dims.toList())
                    val sub = comm.split(color, coords[d])
                        ?: error("DeviceMesh: split of dimension '${names[d]}' returned no communicator for rank ${comm.rank}")
                    created += sub
                }
            } catch (e: Throwable) {
                for (c in created) runCatching { c.close() }.exceptionOrNull()?.let { e.addSuppressed(it) }
                throw e
            }
            return DeviceMesh(comm, dims, names.toTypedArray(), created)
        }

        private fun unravel(rank: Int, dims: IntArray): List<Int> {
            val out = IntArray(dims.size)
            var r = rank
            for (d in dims.indices.reversed()) {
                out[d] = r % dims[d]
                r /= dims[d]
            }
            return out.toList()
        }

        private fun ravel(coords: List<Int>, dims: List<Int>): Int {
            var r = 0
            for (d in dims.indices) r = r * dims[d] + coords[d]
            return r
        }
    }
}
