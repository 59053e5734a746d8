package dev.tpcomm.mpi

import java.lang.foreign.FunctionDescriptor
import java.lang.foreign.Linker
import java.lang.foreign.MemoryLayout
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.lang.invoke.MethodHandle
import java.lang.invoke.MethodHandles
import java.lang.invoke.MethodType

// Generated once from the MPI function list (see MpiBinding); kept by hand since.

/**
 * Downcall handles of the loaded MPI library, in static final fields so the JIT treats them as
 * constants. Every handle has the uniform Java type `(long|int...)int`: pointers and handles are
 * `long`; for MPICH's `int` handles the descriptor says `int` and the handle narrows the `long`.
 * Initialised on first use from [MpiLibrary.loaded], which must be set by then.
 */
internal object MpiDowncalls {
    private val library: MpiLibrary = checkNotNull(MpiLibrary.loaded) { "the MPI library must be loaded before its functions are used" }
    private val intHandles: Boolean = library.implementation.mpichAbi
    private val linker: Linker = Linker.nativeLinker()

    private fun handle(name: String, kinds: String): MethodHandle {
        val address = library.find(name)
        check(address != 0L) { "${library.path} has no function $name" }
        val layouts = kinds.map { k ->
            when (k) {
                'P' -> ValueLayout.JAVA_LONG
                'I' -> ValueLayout.JAVA_INT
                else -> if (intHandles) ValueLayout.JAVA_INT else ValueLayout.JAVA_LONG
            }
        }.toTypedArray<MemoryLayout>()
        val raw = linker.downcallHandle(MemorySegment.ofAddress(address), FunctionDescriptor.of(ValueLayout.JAVA_INT, *layouts))
        val javaTypes = kinds.map { if (it == 'I') Int::class.javaPrimitiveType!! else Long::class.javaPrimitiveType!! }
        return MethodHandles.explicitCastArguments(raw, MethodType.methodType(Int::class.javaPrimitiveType!!, javaTypes))
    }

    private fun optional(name: String): MethodHandle? {
        val address = library.find(name)
        if (address == 0L) return null
        return linker.downcallHandle(MemorySegment.ofAddress(address), FunctionDescriptor.of(ValueLayout.JAVA_INT))
    }

    @JvmField val INITIALIZED: MethodHandle = handle("MPI_Initialized", "P")
    @JvmField val FINALIZED: MethodHandle = handle("MPI_Finalized", "P")
    @JvmField val INIT_THREAD: MethodHandle = handle("MPI_Init_thread", "PPIP")
    @JvmField val FINALIZE: MethodHandle = handle("MPI_Finalize", "")
    @JvmField val ABORT: MethodHandle = handle("MPI_Abort", "HI")
    @JvmField val ERROR_STRING: MethodHandle = handle("MPI_Error_string", "IPP")
    @JvmField val COMM_RANK: MethodHandle = handle("MPI_Comm_rank", "HP")
    @JvmField val COMM_SIZE: MethodHandle = handle("MPI_Comm_size", "HP")
    @JvmField val COMM_DUP: MethodHandle = handle("MPI_Comm_dup", "HP")
    @JvmField val COMM_SPLIT: MethodHandle = handle("MPI_Comm_split", "HIIP")
    @JvmField val COMM_FREE: MethodHandle = handle("MPI_Comm_free", "P")
    @JvmField val COMM_SET_ERRHANDLER: MethodHandle = handle("MPI_Comm_set_errhandler", "HH")
    @JvmField val COMM_GET_ATTR: MethodHandle = handle("MPI_Comm_get_attr", "HIPP")
    @JvmField val ALLREDUCE: MethodHandle = handle("MPI_Allreduce", "PPIHHH")
    @JvmField val BCAST: MethodHandle = handle("MPI_Bcast", "PIHIH")
    @JvmField val REDUCE: MethodHandle = handle("MPI_Reduce", "PPIHHIH")
    @JvmField val ALLGATHER: MethodHandle = handle("MPI_Allgather", "PIHPIHH")
    @JvmField val REDUCE_SCATTER_BLOCK: MethodHandle = handle("MPI_Reduce_scatter_block", "PPIHHH")
    @JvmField val GATHER: MethodHandle = handle("MPI_Gather", "PIHPIHIH")
    @JvmField val SCATTER: MethodHandle = handle("MPI_Scatter", "PIHPIHIH")
    @JvmField val ALLTOALL: MethodHandle = handle("MPI_Alltoall", "PIHPIHH")
    @JvmField val BARRIER: MethodHandle = handle("MPI_Barrier", "H")
    @JvmField val IALLREDUCE: MethodHandle = handle("MPI_Iallreduce", "PPIHHHP")
    @JvmField val IBCAST: MethodHandle = handle("MPI_Ibcast", "PIHIHP")
    @JvmField val IREDUCE: MethodHandle = handle("MPI_Ireduce", "PPIHHIHP")
    @JvmField val IALLGATHER: MethodHandle = handle("MPI_Iallgather", "PIHPIHHP")
    @JvmField val IREDUCE_SCATTER_BLOCK: MethodHandle = handle("MPI_Ireduce_scatter_block", "PPIHHHP")
    @JvmField val IGATHER: MethodHandle = handle("MPI_Igather", "PIHPIHIHP")
    @JvmField val ISCATTER: MethodHandle = handle("MPI_Iscatter", "PIHPIHIHP")
    @JvmField val IALLTOALL: MethodHandle = handle("MPI_Ialltoall", "PIHPIHHP")
    @JvmField val IBARRIER: MethodHandle = handle("MPI_Ibarrier", "HP")
    @JvmField val ALLGATHERV: MethodHandle = handle("MPI_Allgatherv", "PIHPPPHH")
    @JvmField val REDUCE_SCATTER: MethodHandle = handle("MPI_Reduce_scatter", "PPPHHH")
    @JvmField val ALLTOALLV: MethodHandle = handle("MPI_Alltoallv", "PPPHPPPHH")
    @JvmField val IALLGATHERV: MethodHandle = handle("MPI_Iallgatherv", "PIHPPPHHP")
    @JvmField val IREDUCE_SCATTER: MethodHandle = handle("MPI_Ireduce_scatter", "PPPHHHP")
    @JvmField val IALLTOALLV: MethodHandle = handle("MPI_Ialltoallv", "PPPHPPPHHP")
    @JvmField val ISEND: MethodHandle = handle("MPI_Isend", "PIHIIHP")
    @JvmField val IRECV: MethodHandle = handle("MPI_Irecv", "PIHIIHP")
    @JvmField val TEST: MethodHandle = handle("MPI_Test", "PPP")
    @JvmField val IPROBE: MethodHandle = handle("MPI_Iprobe", "IIHPP")
    @JvmField val CANCEL: MethodHandle = handle("MPI_Cancel", "P")
    @JvmField val QUERY_CUDA_SUPPORT: MethodHandle? = optional("MPIX_Query_cuda_support")
}

/** [MpiBinding] over the loaded library: each method is one `invokeExact` of a constant handle. */
internal class FfmMpiBinding(override val abi: MpiAbi) : MpiBinding {
    override fun initialized(flagOut: Long): Int = MpiDowncalls.INITIALIZED.invokeExact(flagOut) as Int
    override fun finalized(flagOut: Long): Int = MpiDowncalls.FINALIZED.invokeExact(flagOut) as Int
    override fun initThread(required: Int, providedOut: Long): Int =
        MpiDowncalls.INIT_THREAD.invokeExact(0L, 0L, required, providedOut) as Int
    override fun finalize(): Int = MpiDowncalls.FINALIZE.invokeExact() as Int
    override fun abort(comm: Long, code: Int): Int = MpiDowncalls.ABORT.invokeExact(comm, code) as Int
    override fun errorString(code: Int, buffer: Long, lengthOut: Long): Int = MpiDowncalls.ERROR_STRING.invokeExact(code, buffer, lengthOut) as Int
    override fun commRank(comm: Long, out: Long): Int = MpiDowncalls.COMM_RANK.invokeExact(comm, out) as Int
    override fun commSize(comm: Long, out: Long): Int = MpiDowncalls.COMM_SIZE.invokeExact(comm, out) as Int
    override fun commDup(comm: Long, newOut: Long): Int = MpiDowncalls.COMM_DUP.invokeExact(comm, newOut) as Int
    override fun commSplit(comm: Long, color: Int, key: Int, newOut: Long): Int = MpiDowncalls.COMM_SPLIT.invokeExact(comm, color, key, newOut) as Int
    override fun commFree(commInOut: Long): Int = MpiDowncalls.COMM_FREE.invokeExact(commInOut) as Int
    override fun commSetErrhandler(comm: Long, errhandler: Long): Int = MpiDowncalls.COMM_SET_ERRHANDLER.invokeExact(comm, errhandler) as Int
    override fun commGetAttr(comm: Long, keyval: Int, valuePointerOut: Long, flagOut: Long): Int =
        MpiDowncalls.COMM_GET_ATTR.invokeExact(comm, keyval, valuePointerOut, flagOut) as Int
    override fun allreduce(send: Long, recv: Long, count: Int, type: Long, op: Long, comm: Long): Int = MpiDowncalls.ALLREDUCE.invokeExact(send, recv, count, type, op, comm) as Int
    override fun bcast(buffer: Long, count: Int, type: Long, root: Int, comm: Long): Int = MpiDowncalls.BCAST.invokeExact(buffer, count, type, root, comm) as Int
    override fun reduce(send: Long, recv: Long, count: Int, type: Long, op: Long, root: Int, comm: Long): Int = MpiDowncalls.REDUCE.invokeExact(send, recv, count, type, op, root, comm) as Int
    override fun allgather(send: Long, sendCount: Int, sendType: Long, recv: Long, recvCount: Int, recvType: Long, comm: Long): Int = MpiDowncalls.ALLGATHER.invokeExact(send, sendCount, sendType, recv, recvCount, recvType, comm) as Int
    override fun reduceScatterBlock(send: Long, recv: Long, recvCount: Int, type: Long, op: Long, comm: Long): Int = MpiDowncalls.REDUCE_SCATTER_BLOCK.invokeExact(send, recv, recvCount, type, op, comm) as Int
    override fun gather(send: Long, sendCount: Int, sendType: Long, recv: Long, recvCount: Int, recvType: Long, root: Int, comm: Long): Int = MpiDowncalls.GATHER.invokeExact(send, sendCount, sendType, recv, recvCount, recvType, root, comm) as Int
    override fun scatter(send: Long, sendCount: Int, sendType: Long, recv: Long, recvCount: Int, recvType: Long, root: Int, comm: Long): Int = MpiDowncalls.SCATTER.invokeExact(send, sendCount, sendType, recv, recvCount, recvType, root, comm) as Int
    override fun alltoall(send: Long, sendCount: Int, sendType: Long, recv: Long, recvCount: Int, recvType: Long, comm: Long): Int = MpiDowncalls.ALLTOALL.invokeExact(send, sendCount, sendType, recv, recvCount, recvType, comm) as Int
    override fun barrier(comm: Long): Int = MpiDowncalls.BARRIER.invokeExact(comm) as Int
    override fun iallreduce(send: Long, recv: Long, count: Int, type: Long, op: Long, comm: Long, request: Long): Int = MpiDowncalls.IALLREDUCE.invokeExact(send, recv, count, type, op, comm, request) as Int
    override fun ibcast(buffer: Long, count: Int, type: Long, root: Int, comm: Long, request: Long): Int = MpiDowncalls.IBCAST.invokeExact(buffer, count, type, root, comm, request) as Int
    override fun ireduce(send: Long, recv: Long, count: Int, type: Long, op: Long, root: Int, comm: Long, request: Long): Int = MpiDowncalls.IREDUCE.invokeExact(send, recv, count, type, op, root, comm, request) as Int
    override fun iallgather(send: Long, sendCount: Int, sendType: Long, recv: Long, recvCount: Int, recvType: Long, comm: Long, request: Long): Int = MpiDowncalls.IALLGATHER.invokeExact(send, sendCount, sendType, recv, recvCount, recvType, comm, request) as Int
    override fun ireduceScatterBlock(send: Long, recv: Long, recvCount: Int, type: Long, op: Long, comm: Long, request: Long): Int = MpiDowncalls.IREDUCE_SCATTER_BLOCK.invokeExact(send, recv, recvCount, type, op, comm, request) as Int
    override fun igather(send: Long, sendCount: Int, sendType: Long, recv: Long, recvCount: Int, recvType: Long, root: Int, comm: Long, request: Long): Int = MpiDowncalls.IGATHER.invokeExact(send, sendCount, sendType, recv, recvCount, recvType, root, comm, request) as Int
    override fun iscatter(send: Long, sendCount: Int, sendType: Long, recv: Long, recvCount: Int, recvType: Long, root: Int, comm: Long, request: Long): Int = MpiDowncalls.ISCATTER.invokeExact(send, sendCount, sendType, recv, recvCount, recvType, root, comm, request) as Int
    override fun ialltoall(send: Long, sendCount: Int, sendType: Long, recv: Long, recvCount: Int, recvType: Long, comm: Long, request: Long): Int = MpiDowncalls.IALLTOALL.invokeExact(send, sendCount, sendType, recv, recvCount, recvType, comm, request) as Int
    override fun ibarrier(comm: Long, request: Long): Int = MpiDowncalls.IBARRIER.invokeExact(comm, request) as Int
    override fun allgatherv(send: Long, sendCount: Int, sendType: Long, recv: Long, recvCounts: Long, displs: Long, recvType: Long, comm: Long): Int =
        MpiDowncalls.ALLGATHERV.invokeExact(send, sendCount, sendType, recv, recvCounts, displs, recvType, comm) as Int
    override fun reduceScatter(send: Long, recv: Long, recvCounts: Long, type: Long, op: Long, comm: Long): Int =
        MpiDowncalls.REDUCE_SCATTER.invokeExact(send, recv, recvCounts, type, op, comm) as Int
    override fun alltoallv(send: Long, sendCounts: Long, sendDispls: Long, sendType: Long, recv: Long, recvCounts: Long, recvDispls: Long, recvType: Long, comm: Long): Int =
        MpiDowncalls.ALLTOALLV.invokeExact(send, sendCounts, sendDispls, sendType, recv, recvCounts, recvDispls, recvType, comm) as Int
    override fun iallgatherv(send: Long, sendCount: Int, sendType: Long, recv: Long, recvCounts: Long, displs: Long, recvType: Long, comm: Long, request: Long): Int =
        MpiDowncalls.IALLGATHERV.invokeExact(send, sendCount, sendType, recv, recvCounts, displs, recvType, comm, request) as Int
    override fun ireduceScatter(send: Long, recv: Long, recvCounts: Long, type: Long, op: Long, comm: Long, request: Long): Int =
        MpiDowncalls.IREDUCE_SCATTER.invokeExact(send, recv, recvCounts, type, op, comm, request) as Int
    override fun ialltoallv(send: Long, sendCounts: Long, sendDispls: Long, sendType: Long, recv: Long, recvCounts: Long, recvDispls: Long, recvType: Long, comm: Long, request: Long): Int =
        MpiDowncalls.IALLTOALLV.invokeExact(send, sendCounts, sendDispls, sendType, recv, recvCounts, recvDispls, recvType, comm, request) as Int
    override fun isend(buffer: Long, count: Int, type: Long, dest: Int, tag: Int, comm: Long, request: Long): Int = MpiDowncalls.ISEND.invokeExact(buffer, count, type, dest, tag, comm, request) as Int
    override fun irecv(buffer: Long, count: Int, type: Long, source: Int, tag: Int, comm: Long, request: Long): Int = MpiDowncalls.IRECV.invokeExact(buffer, count, type, source, tag, comm, request) as Int
    override fun test(request: Long, flagOut: Long, status: Long): Int = MpiDowncalls.TEST.invokeExact(request, flagOut, status) as Int
    override fun iprobe(source: Int, tag: Int, comm: Long, flagOut: Long, status: Long): Int = MpiDowncalls.IPROBE.invokeExact(source, tag, comm, flagOut, status) as Int
    override fun cancel(request: Long): Int = MpiDowncalls.CANCEL.invokeExact(request) as Int
    override fun queryCudaSupport(): Int = MpiDowncalls.QUERY_CUDA_SUPPORT?.let { it.invokeExact() as Int } ?: -1
}
