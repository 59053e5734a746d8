package dev.tpcomm.mpi

/**
 * The native seam: one method per MPI function the backend calls, returning MPI's error code.
 * Handles (`MPI_Comm`, `MPI_Datatype`, `MPI_Op`, `MPI_Request` values) are widened to Long;
 * pointer arguments are native addresses (Long) of memory the caller keeps alive for the call
 * (and, for non-blocking calls, until the request completes). The production implementation
 * ([FfmMpiBinding]) calls the library through `java.lang.foreign`; tests substitute a mock.
 */
internal interface MpiBinding {
    val abi: MpiAbi

    fun initialized(flagOut: Long): Int
    fun finalized(flagOut: Long): Int
    fun initThread(required: Int, providedOut: Long): Int
    fun finalize(): Int
    fun abort(comm: Long, code: Int): Int
    fun errorString(code: Int, buffer: Long, lengthOut: Long): Int

    fun commRank(comm: Long, out: Long): Int
    fun commSize(comm: Long, out: Long): Int
    fun commDup(comm: Long, newOut: Long): Int
    fun commSplit(comm: Long, color: Int, key: Int, newOut: Long): Int
    fun commFree(commInOut: Long): Int
    fun commSetErrhandler(comm: Long, errhandler: Long): Int

    /** `MPI_Comm_get_attr(comm, keyval, &valuePointerOut, &flagOut)`: for predefined keys the value is an `int*`. */
    fun commGetAttr(comm: Long, keyval: Int, valuePointerOut: Long, flagOut: Long): Int

    fun allreduce(send: Long, recv: Long, count: Int, type: Long, op: Long, comm: Long): Int
    fun bcast(buffer: Long, count: Int, type: Long, root: Int, comm: Long): Int
    fun reduce(send: Long, recv: Long, count: Int, type: Long, op: Long, root: Int, comm: Long): Int
    fun allgather(send: Long, sendCount: Int, sendType: Long, recv: Long, recvCount: Int, recvType: Long, comm: Long): Int
    fun reduceScatterBlock(send: Long, recv: Long, recvCount: Int, type: Long, op: Long, comm: Long): Int
    fun gather(send: Long, sendCount: Int, sendType: Long, recv: Long, recvCount: Int, recvType: Long, root: Int, comm: Long): Int
    fun scatter(send: Long, sendCount: Int, sendType: Long, recv: Long, recvCount: Int, recvType: Long, root: Int, comm: Long): Int
    fun alltoall(send: Long, sendCount: Int, sendType: Long, recv: Long, recvCount: Int, recvType: Long, comm: Long): Int
    fun barrier(comm: Long): Int

    /** `MPI_Allgatherv`: [recvCounts] and [displs] are addresses of `int[size]` arrays (elements of [recvType]). */
    fun allgatherv(send: Long, sendCount: Int, sendType: Long, recv: Long, recvCounts: Long, displs: Long, recvType: Long, comm: Long): Int
    /** `MPI_Reduce_scatter`: [recvCounts] is the address of an `int[size]` array. */
    fun reduceScatter(send: Long, recv: Long, recvCounts: Long, type: Long, op: Long, comm: Long): Int
    /** `MPI_Alltoallv`: the counts and displacements are addresses of `int[size]` arrays. */
    fun alltoallv(send: Long, sendCounts: Long, sendDispls: Long, sendType: Long, recv: Long, recvCounts: Long, recvDispls: Long, recvType: Long, comm: Long): Int

    fun iallreduce(send: Long, recv: Long, count: Int, type: Long, op: Long, comm: Long, request: Long): Int
    fun ibcast(buffer: Long, count: Int, type: Long, root: Int, comm: Long, request: Long): Int
    fun ireduce(send: Long, recv: Long, count: Int, type: Long, op: Long, root: Int, comm: Long, request: Long): Int
    fun iallgather(send: Long, sendCount: Int, sendType: Long, recv: Long, recvCount: Int, recvType: Long, comm: Long, request: Long): Int
    fun ireduceScatterBlock(send: Long, recv: Long, recvCount: Int, type: Long, op: Long, comm: Long, request: Long): Int
    fun igather(send: Long, sendCount: Int, sendType: Long, recv: Long, recvCount: Int, recvType: Long, root: Int, comm: Long, request: Long): Int
    fun iscatter(send: Long, sendCount: Int, sendType: Long, recv: Long, recvCount: Int, recvType: Long, root: Int, comm: Long, request: Long): Int
    fun ialltoall(send: Long, sendCount: Int, sendType: Long, recv: Long, recvCount: Int, recvType: Long, comm: Long, request: Long): Int
    fun ibarrier(comm: Long, request: Long): Int
    fun iallgatherv(send: Long, sendCount: Int, sendType: Long, recv: Long, recvCounts: Long, displs: Long, recvType: Long, comm: Long, request: Long): Int
    fun ireduceScatter(send: Long, recv: Long, recvCounts: Long, type: Long, op: Long, comm: Long, request: Long): Int
    fun ialltoallv(send: Long, sendCounts: Long, sendDispls: Long, sendType: Long, recv: Long, recvCounts: Long, recvDispls: Long, recvType: Long, comm: Long, request: Long): Int

    fun isend(buffer: Long, count: Int, type: Long, dest: Int, tag: Int, comm: Long, request: Long): Int
    fun irecv(buffer: Long, count: Int, type: Long, source: Int, tag: Int, comm: Long, request: Long): Int
    fun test(request: Long, flagOut: Long, status: Long): Int
    fun iprobe(source: Int, tag: Int, comm: Long, flagOut: Long, status: Long): Int
    fun cancel(request: Long): Int

    /** `MPIX_Query_cuda_support()`: 1 or 0, or -1 when the library does not have the function. */
    fun queryCudaSupport(): Int
}
