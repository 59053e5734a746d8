package dev.tpcomm.gpu

import java.lang.foreign.MemorySegment

/**
 * The subset of the NCCL C API the engine uses, one method per C function, with C's conventions:
 * every method returns the `ncclResult_t` code ([NcclResult]) and writes results into the
 * caller's out-arrays (index 0). Handles (`ncclComm_t`, `cudaStream_t`/`hipStream_t`) and device
 * pointers are native addresses as `Long`; 0 is NULL.
 *
 * This is the seam PyTorch's own NCCL backend has: comm-nccl's `JavaCppNcclApi` implements
 * it over NCCL through JavaCPP, comm-rccl over RCCL through `java.lang.foreign`, and
 * comm-gpu's test fixture `SimulatedGpuPlatform` in memory for machines without a GPU.
 *
 * Thread-safety: as NCCL's. The engine calls a communicator's functions only from that
 * communicator's native thread; group start/end are per thread, as in NCCL.
 */
public interface NcclApi {
    /** Human-readable name of the library (`NCCL`, `RCCL`, ...), used in messages. */
    public val libraryName: String

    /**
     * Whether the library's `ncclFloat8e4m3`/`ncclFloat8e5m2` are the OCP formats that
     * [dev.tpcomm.DType.Float8E4M3]/[dev.tpcomm.DType.Float8E5M2] hold: true for NCCL (CUDA's
     * `__nv_fp8_e4m3`, E4M3FN, and `__nv_fp8_e5m2`); false for RCCL, whose `rccl_float8` is the
     * FNUZ variant (ROCm/rccl `src/include/rccl_float8.h`, `negative_zero_nan`). When false the
     * engine refuses FP8 reductions (data movement still carries the bytes).
     */
    public val float8IsOcp: Boolean get() = true

    /** `ncclGetVersion(int*)`. */
    public fun getVersion(version: IntArray): Int

    /** `ncclGetUniqueId(ncclUniqueId*)`: fills the 128 bytes of [uniqueId]. */
    public fun getUniqueId(uniqueId: ByteArray): Int

    /**
     * `ncclCommInitRankConfig(ncclComm_t*, nranks, ncclUniqueId, rank, ncclConfig_t*)`: the library
     * writes the new communicator into the 8-byte native cell [comm] (the `ncclComm_t*`), possibly
     * from its own thread after this returns (NCCL 2.14-2.17 read and write it from the init job), so
     * the cell must stay allocated until the communicator is ready or aborted. With
     * [NcclCommConfig.blocking] false the call may return [NcclResult.IN_PROGRESS]; poll
     * [commGetAsyncError] until it reports success.
     */
    public fun commInitRankConfig(comm: MemorySegment, nranks: Int, uniqueId: ByteArray, rank: Int, config: NcclCommConfig): Int

    /**
     * `ncclCommSplit(comm, color, key, ncclComm_t* newcomm, ncclConfig_t*)`; [config] null inherits the
     * parent's. Non-blocking, NCCL sets `*newcomm = NULL`, returns, and its background job writes the
     * child into the cell [newComm] when the split is complete (NVIDIA/nccl `src/init.cc`:3098-3099 and
     * 1959-1961): keep [newComm] allocated until the parent's [commGetAsyncError] leaves `ncclInProgress`.
     */
    public fun commSplit(comm: Long, color: Int, key: Int, newComm: MemorySegment, config: NcclCommConfig?): Int

    /** `ncclCommFinalize(comm)` (NCCL 2.14+): flushes the communicator's work; call it (and wait for success) before [commDestroy]. */
    public fun commFinalize(comm: Long): Int

    /** `ncclCommAbort(comm)`: frees the communicator and stops its operations still running on the device. */
    public fun commAbort(comm: Long): Int

    /** `ncclCommDestroy(comm)`. */
    public fun commDestroy(comm: Long): Int

    /** `ncclCommGetAsyncError(comm, ncclResult_t*)`: writes the communicator's asynchronous state into `asyncError[0]`. */
    public fun commGetAsyncError(comm: Long, asyncError: IntArray): Int

    /** `ncclCommCount(comm, int*)`. */
    public fun commCount(comm: Long, count: IntArray): Int

    /** `ncclCommUserRank(comm, int*)`. */
    public fun commUserRank(comm: Long, rank: IntArray): Int

    /** `ncclAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream)`. */
    public fun allReduce(sendBuf: Long, recvBuf: Long, count: Long, datatype: Int, op: Int, comm: Long, stream: Long): Int

    /** `ncclBroadcast(sendbuff, recvbuff, count, datatype, root, comm, stream)`. */
    public fun broadcast(sendBuf: Long, recvBuf: Long, count: Long, datatype: Int, root: Int, comm: Long, stream: Long): Int

    /** `ncclReduce(sendbuff, recvbuff, count, datatype, op, root, comm, stream)`. */
    public fun reduce(sendBuf: Long, recvBuf: Long, count: Long, datatype: Int, op: Int, root: Int, comm: Long, stream: Long): Int

    /** `ncclAllGather(sendbuff, recvbuff, sendcount, datatype, comm, stream)`. */
    public fun allGather(sendBuf: Long, recvBuf: Long, sendCount: Long, datatype: Int, comm: Long, stream: Long): Int

    /** `ncclReduceScatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream)`. */
    public fun reduceScatter(sendBuf: Long, recvBuf: Long, recvCount: Long, datatype: Int, op: Int, comm: Long, stream: Long): Int

    /**
     * `ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, datatype, residence, comm)` (NCCL 2.11+;
     * NVIDIA/nccl `src/enqueue.cc`): writes into `op[0]` a new reduction operator of [comm] that
     * multiplies this rank's input by the scalar of [datatype] at [scalar] before summing. With
     * [residence] [NcclRedOp.SCALAR_HOST_IMMEDIATE] the scalar is host memory read before the call
     * returns. The operator is for collectives of [comm] and [datatype] only (another datatype is
     * `ncclInvalidArgument`); destroy it with [redOpDestroy] once the last call given it returned
     * (`src/nccl.h.in`). Each rank creates its own, from its own scalar, without communicating.
     */
    public fun redOpCreatePreMulSum(op: IntArray, scalar: MemorySegment, datatype: Int, residence: Int, comm: Long): Int

    /**
     * `ncclRedOpDestroy(op, comm)`: frees an operator [redOpCreatePreMulSum] made on [comm]
     * (`ncclInvalidArgument` for a built-in or unknown operator). The operators of a communicator
     * also end with it (`ncclCommDestroy`/`ncclCommAbort` free them).
     */
    public fun redOpDestroy(op: Int, comm: Long): Int

    /** `ncclSend(sendbuff, count, datatype, peer, comm, stream)`. */
    public fun send(sendBuf: Long, count: Long, datatype: Int, peer: Int, comm: Long, stream: Long): Int

    /** `ncclRecv(recvbuff, count, datatype, peer, comm, stream)`. */
    public fun recv(recvBuf: Long, count: Long, datatype: Int, peer: Int, comm: Long, stream: Long): Int

    /** `ncclGroupStart()`. */
    public fun groupStart(): Int

    /** `ncclGroupEnd()`. */
    public fun groupEnd(): Int

    /** `ncclGetErrorString(result)`. */
    public fun getErrorString(result: Int): String

    /** `ncclGetLastError(comm)` (NCCL 2.13+); null when the library has none. */
    public fun getLastError(comm: Long): String?

    /**
     * The value of environment variable [name] as the library reads it (NCCL's `ncclGetEnv` reads the
     * C environment with `getenv`), or null. The engine reads `NCCL_COMM_BLOCKING` through it
     * (docs/nccl-semantics.md N6). By default the process's C environment ([NativeEnvironment.get]).
     */
    public fun getEnv(name: String): String? = NativeEnvironment.get(name)
}

/**
 * The communicator's asynchronous state as one code: `ncclCommGetAsyncError`'s own failure, else the
 * state it wrote ([NcclResult.SUCCESS], [NcclResult.IN_PROGRESS] or an error). [status] is the
 * caller's out-array, reused between polls.
 */
internal fun NcclApi.asyncState(comm: Long, status: IntArray): Int {
    val code = commGetAsyncError(comm, status)
    return if (code != NcclResult.SUCCESS) code else status[0]
}
