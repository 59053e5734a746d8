package dev.tpcomm.java

import dev.tpcomm.coroutines.DeviceMesh

/**
 * A [DeviceMesh] for Java: the ranks laid out as an n-dimensional mesh (row-major, last dimension
 * fastest), with one [JavaCommunicator] per dimension. Build it with
 * [JavaCommunicator.deviceMesh] or [JavaCommunicator.deviceMeshBlocking] on every rank:
 *
 * ```java
 * try (JavaDeviceMesh mesh = comm.deviceMeshBlocking(List.of(2, 2), List.of("dp", "tp"))) {
 *     mesh.get("tp").allReduceBlocking(partialSum);
 *     mesh.get("dp").allReduceBlocking(gradient);
 * }
 * ```
 *
 * [close] closes the per-dimension communicators (not the communicator the mesh was built from).
 * Thread-safe for reading.
 */
public class JavaDeviceMesh internal constructor(private val mesh: DeviceMesh) : AutoCloseable {
    private val byName: Map<String, JavaCommunicator> = mesh.names.associateWith { JavaCommunicator(mesh.communicator(it)) }

    /** Size of each dimension, outermost first. */
    public val shape: List<Int> get() = mesh.shape

    /** Name of each dimension, in the order of [shape]. */
    public val names: List<String> get() = mesh.names

    /** This rank's coordinate along each dimension. */
    public val coordinates: List<Int> get() = mesh.coordinates

    /**
     * The communicator of the dimension called [name]: the ranks sharing every coordinate of this
     * rank except the one along [name].
     *
     * @throws IllegalArgumentException if no dimension has that name.
     */
    public fun get(name: String): JavaCommunicator =
        byName[name] ?: throw IllegalArgumentException("DeviceMesh: no dimension named '$name'; the dimensions are ${mesh.names}")

    /** This rank's coordinate along the dimension called [name]. */
    public fun coordinate(name: String): Int = mesh.coordinate(name)

    /** Size of the dimension called [name]. */
    public fun size(name: String): Int = mesh.size(name)

    /** The ranks of the parent communicator, in sub-communicator rank order, that share [name]'s communicator with this rank. */
    public fun ranksAlong(name: String): List<Int> = mesh.ranksAlong(name)

    /** The Kotlin [DeviceMesh] behind this facade. */
    public fun unwrap(): DeviceMesh = mesh

    /** Closes the per-dimension communicators. Idempotent. */
    override fun close() {
        mesh.close()
    }

    override fun toString(): String = mesh.toString()
}
