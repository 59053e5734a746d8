package dev.tpcomm.mpi

import java.lang.foreign.Arena
import java.lang.foreign.FunctionDescriptor
import java.lang.foreign.Linker
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.lang.invoke.MethodHandle

/**
 * MPI's dynamic-process functions that [MpiStoreWorld] joins singleton processes with:
 * `MPI_Open_port`, `MPI_Close_port`, `MPI_Comm_accept`, `MPI_Comm_connect`, `MPI_Intercomm_merge`
 * and `MPI_Comm_free`, for Open MPI's ABI only (handles are pointers: `MPI_COMM_SELF` is
 * `&ompi_mpi_comm_self`, `MPI_INFO_NULL` `&ompi_mpi_info_null`). Kept apart from [MpiBinding]: only
 * the world's formation calls them, once per process. Each method is one blocking MPI call and
 * returns the handle it made, or throws [IllegalStateException] with MPI's error string.
 *
 * Not thread-safe beyond MPI's own rules: call from the thread that makes the process's MPI calls.
 */
internal class MpiDynamicProcess(private val library: MpiLibrary, private val binding: MpiBinding) {
    init {
        require(!library.implementation.mpichAbi) { "MpiDynamicProcess speaks Open MPI's ABI; ${library.implementation} was loaded" }
    }

    private val linker = Linker.nativeLinker()

    private fun symbol(name: String): Long = library.find(name).also { check(it != 0L) { "${library.path} has no symbol $name" } }

    private fun handle(name: String, vararg args: ValueLayout): MethodHandle =
        linker.downcallHandle(MemorySegment.ofAddress(symbol(name)), FunctionDescriptor.of(ValueLayout.JAVA_INT, *args))

    private val l = ValueLayout.JAVA_LONG
    private val i = ValueLayout.JAVA_INT
    private val openPort = handle("MPI_Open_port", l, l)
    private val closePort = handle("MPI_Close_port", l)
    private val accept = handle("MPI_Comm_accept", l, l, i, l, l)
    private val connect = handle("MPI_Comm_connect", l, l, i, l, l)
    private val merge = handle("MPI_Intercomm_merge", l, i, l)

    /** `MPI_COMM_SELF`. */
    val commSelf: Long = symbol("ompi_mpi_comm_self")
    private val infoNull: Long = symbol("ompi_mpi_info_null")

    private fun checked(rc: Int, call: String) {
        check(rc == 0) { "$call failed: ${MpiErrors.describe(binding, rc)}" }
    }

    /** `MPI_Open_port(MPI_INFO_NULL, name)`: the port's name. */
    fun openPort(): String = Arena.ofConfined().use { a ->
        val name = a.allocate(MAX_PORT_NAME.toLong())
        checked(openPort.invokeExact(infoNull, name.address()) as Int, "MPI_Open_port")
        name.getString(0)
    }

    /** `MPI_Close_port(port)`. */
    fun closePort(port: String) {
        Arena.ofConfined().use { a -> checked(closePort.invokeExact(a.allocateFrom(port).address()) as Int, "MPI_Close_port") }
    }

    /** `MPI_Comm_accept(port, MPI_INFO_NULL, 0, comm, &inter)`, collective over [comm]: the intercommunicator. */
    fun accept(port: String, comm: Long): Long = Arena.ofConfined().use { a ->
        val out = a.allocate(ValueLayout.JAVA_LONG)
        checked(accept.invokeExact(a.allocateFrom(port).address(), infoNull, 0, comm, out.address()) as Int, "MPI_Comm_accept")
        out.get(ValueLayout.JAVA_LONG, 0)
    }

    /** `MPI_Comm_connect(port, MPI_INFO_NULL, 0, comm, &inter)`, collective over [comm]: the intercommunicator. */
    fun connect(port: String, comm: Long): Long = Arena.ofConfined().use { a ->
        val out = a.allocate(ValueLayout.JAVA_LONG)
        checked(connect.invokeExact(a.allocateFrom(port).address(), infoNull, 0, comm, out.address()) as Int, "MPI_Comm_connect")
        out.get(ValueLayout.JAVA_LONG, 0)
    }

    /**
     * `MPI_Intercomm_merge(inter, high, &intra)`: the group that passes [high] false comes first
     * in the merged communicator, so the ranks already joined keep their ranks and the newcomer
     * gets the next one.
     */
    fun merge(inter: Long, high: Boolean): Long = Arena.ofConfined().use { a ->
        val out = a.allocate(ValueLayout.JAVA_LONG)
        checked(merge.invokeExact(inter, if (high) 1 else 0, out.address()) as Int, "MPI_Intercomm_merge")
        out.get(ValueLayout.JAVA_LONG, 0)
    }

    /** `MPI_Comm_free(&comm)` of a communicator the formation made (never `MPI_COMM_SELF`). */
    fun free(comm: Long) {
        if (comm == commSelf || comm == 0L) return
        Arena.ofConfined().use { a ->
            val cell = a.allocate(ValueLayout.JAVA_LONG)
            cell.set(ValueLayout.JAVA_LONG, 0, comm)
            checked(binding.commFree(cell.address()), "MPI_Comm_free")
        }
    }

    /** `MPI_Comm_rank` and `MPI_Comm_size` of [comm]. */
    fun rankAndSize(comm: Long): Pair<Int, Int> = Arena.ofConfined().use { a ->
        val out = a.allocate(ValueLayout.JAVA_INT)
        checked(binding.commRank(comm, out.address()), "MPI_Comm_rank")
        val rank = out.get(ValueLayout.JAVA_INT, 0)
        checked(binding.commSize(comm, out.address()), "MPI_Comm_size")
        rank to out.get(ValueLayout.JAVA_INT, 0)
    }

    private companion object {
        /** `MPI_MAX_PORT_NAME` of Open MPI 4.1's `mpi.h`. */
        const val MAX_PORT_NAME = 1024
    }
}
