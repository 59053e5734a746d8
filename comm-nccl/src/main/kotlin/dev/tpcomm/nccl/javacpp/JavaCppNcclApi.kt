package dev.tpcomm.nccl.javacpp

import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.gpu.NcclApi
import dev.tpcomm.gpu.NcclCommConfig
import dev.tpcomm.gpu.NcclConnector
import org.bytedeco.cuda.cudart.CUstream_st
import org.bytedeco.cuda.global.nccl
import org.bytedeco.cuda.nccl.ncclComm
import org.bytedeco.cuda.nccl.ncclConfig_t
import org.bytedeco.cuda.nccl.ncclUniqueId
import org.bytedeco.javacpp.BytePointer
import org.bytedeco.javacpp.IntPointer
import org.bytedeco.javacpp.Loader
import org.bytedeco.javacpp.PointerPointer
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

/**
 * [NcclApi] over NVIDIA NCCL through the JavaCPP presets (`org.bytedeco.cuda.global.nccl`,
 * preset 13.3-9.25-1.5.14, built against NCCL 2.30.7). Every method is one JNI call into
 * `libnccl.so`; the first use loads the library (and throws `UnsatisfiedLinkError` when it or the
 * NVIDIA driver is missing). Stateless and thread-safe as NCCL is.
 *
 * A raw native seam: its methods call the library directly (`ncclCommAbort`, `ncclGroupStart`, frees
 * of device memory) outside the engine's ordering, so it needs the [InternalTpcommApi] opt-in. Users
 * get it through `Comm.create("nccl")`, never by constructing it.
 */
@InternalTpcommApi
public class JavaCppNcclApi : NcclApi {
    override val libraryName: String get() = "NCCL"

    override fun getVersion(version: IntArray): Int = nccl.ncclGetVersion(version)

    // Issue 35, finding 7: the per-call ncclUniqueId, ncclConfig_t and netName live in java.lang.foreign
    // arenas, seen through JavaCPP's cast constructors (which allocate nothing and register no
    // deallocator). An allocating JavaCPP constructor counts against Pointer.maxBytes and checks the
    // process's physical memory against Pointer.maxPhysicalBytes (org.bytedeco.javacpp.Pointer
    // .DeallocatorReference), so an init or split could fail with an OutOfMemoryError that has nothing
    // to do with NCCL in a process whose resident set is large (pinned buffers, PyTorch).

    override fun getUniqueId(uniqueId: ByteArray): Int {
        require(uniqueId.size == NcclConnector.UNIQUE_ID_BYTES) { "an ncclUniqueId has ${NcclConnector.UNIQUE_ID_BYTES} bytes" }
        Arena.ofConfined().use { a ->
            val seg = a.allocate(NcclConnector.UNIQUE_ID_BYTES.toLong(), 8)
            val rc = nccl.ncclGetUniqueId(ncclUniqueId(RawPointer(seg.address())))
            MemorySegment.copy(seg, ValueLayout.JAVA_BYTE, 0, uniqueId, 0, uniqueId.size)
            return rc
        }
    }

    override fun commInitRankConfig(comm: MemorySegment, nranks: Int, uniqueId: ByteArray, rank: Int, config: NcclCommConfig): Int {
        Arena.ofConfined().use { a ->
            val seg = a.allocate(NcclConnector.UNIQUE_ID_BYTES.toLong(), 8)
            MemorySegment.copy(uniqueId, 0, seg, ValueLayout.JAVA_BYTE, 0, uniqueId.size)
            val native = NativeConfig(config, a)
            // The engine's cell (it outlives this call), not a JNI temporary: NCCL may write it later.
            return nccl.ncclCommInitRankConfig(PointerPointer<ncclComm>(RawPointer(comm.address())), nranks, ncclUniqueId(RawPointer(seg.address())), rank, native.struct)
        }
    }

    override fun commSplit(comm: Long, color: Int, key: Int, newComm: MemorySegment, config: NcclCommConfig?): Int {
        Arena.ofConfined().use { a ->
            val native = config?.let { NativeConfig(it, a) }
            // NCCL's split job writes the child into this cell after the call returned (init.cc:1959-1961).
            return nccl.ncclCommSplit(comm(comm), color, key, PointerPointer<ncclComm>(RawPointer(newComm.address())), native?.struct)
        }
    }

    override fun commFinalize(comm: Long): Int = nccl.ncclCommFinalize(comm(comm))

    override fun commAbort(comm: Long): Int = nccl.ncclCommAbort(comm(comm))

    override fun commDestroy(comm: Long): Int = nccl.ncclCommDestroy(comm(comm))

    override fun commGetAsyncError(comm: Long, asyncError: IntArray): Int = nccl.ncclCommGetAsyncError(comm(comm), asyncError)

    override fun commCount(comm: Long, count: IntArray): Int = nccl.ncclCommCount(comm(comm), count)

    override fun commUserRank(comm: Long, rank: IntArray): Int = nccl.ncclCommUserRank(comm(comm), rank)

    override fun allReduce(sendBuf: Long, recvBuf: Long, count: Long, datatype: Int, op: Int, comm: Long, stream: Long): Int =
        nccl.ncclAllReduce(RawPointer(sendBuf), RawPointer(recvBuf), count, datatype, op, comm(comm), stream(stream))

    override fun broadcast(sendBuf: Long, recvBuf: Long, count: Long, datatype: Int, root: Int, comm: Long, stream: Long): Int =
        nccl.ncclBroadcast(RawPointer(sendBuf), RawPointer(recvBuf), count, datatype, root, comm(comm), stream(stream))

    override fun reduce(sendBuf: Long, recvBuf: Long, count: Long, datatype: Int, op: Int, root: Int, comm: Long, stream: Long): Int =
        nccl.ncclReduce(RawPointer(sendBuf), RawPointer(recvBuf), count, datatype, op, root, comm(comm), stream(stream))

    override fun allGather(sendBuf: Long, recvBuf: Long, sendCount: Long, datatype: Int, comm: Long, stream: Long): Int =
        nccl.ncclAllGather(RawPointer(sendBuf), RawPointer(recvBuf), sendCount, datatype, comm(comm), stream(stream))

    override fun reduceScatter(sendBuf: Long, recvBuf: Long, recvCount: Long, datatype: Int, op: Int, comm: Long, stream: Long): Int =
        nccl.ncclReduceScatter(RawPointer(sendBuf), RawPointer(recvBuf), recvCount, datatype, op, comm(comm), stream(stream))

    override fun redOpCreatePreMulSum(op: IntArray, scalar: MemorySegment, datatype: Int, residence: Int, comm: Long): Int =
        nccl.ncclRedOpCreatePreMulSum(op, RawPointer(scalar.address()), datatype, residence, comm(comm))

    override fun redOpDestroy(op: Int, comm: Long): Int = nccl.ncclRedOpDestroy(op, comm(comm))

    override fun send(sendBuf: Long, count: Long, datatype: Int, peer: Int, comm: Long, stream: Long): Int =
        nccl.ncclSend(RawPointer(sendBuf), count, datatype, peer, comm(comm), stream(stream))

    override fun recv(recvBuf: Long, count: Long, datatype: Int, peer: Int, comm: Long, stream: Long): Int =
        nccl.ncclRecv(RawPointer(recvBuf), count, datatype, peer, comm(comm), stream(stream))

    override fun groupStart(): Int = nccl.ncclGroupStart()

    override fun groupEnd(): Int = nccl.ncclGroupEnd()

    override fun getErrorString(result: Int): String = nccl.ncclGetErrorString(result)?.string ?: "unknown"

    override fun getLastError(comm: Long): String? = nccl.ncclGetLastError(comm(comm))?.string

    private fun comm(handle: Long): ncclComm = ncclComm(RawPointer(handle))

    private fun stream(handle: Long): CUstream_st = CUstream_st(RawPointer(handle))

    /**
     * An `ncclConfig_t` filled as `NCCL_CONFIG_INITIALIZER` does: size, `NCCL_API_MAGIC`, the header's
     * version, every int field `NCCL_CONFIG_UNDEF_INT` and every pointer NULL; then [config]'s fields.
     */
    private class NativeConfig(config: NcclCommConfig, arena: Arena) {
        val struct = ncclConfig_t(RawPointer(arena.allocate(Loader.sizeof(ncclConfig_t::class.java).toLong(), 8).address()))
        private val netName: BytePointer? = config.netName?.let { BytePointer(RawPointer(arena.allocateFrom(it).address())) }

        init {
            val size = Loader.sizeof(ncclConfig_t::class.java).toLong()
            val ints = IntPointer(struct)
            for (i in 4 until size / 4) ints.put(i, NcclCommConfig.UNDEF_INT) // past size(8)+magic(4)+version(4)
            struct.size(size)
            struct.magic(nccl.NCCL_API_MAGIC)
            struct.version(nccl.NCCL_VERSION_CODE)
            struct.netName(netName)
            struct.commName(null)
            struct.blocking(if (config.blocking) 1 else 0)
            config.minCtas?.let { struct.minCTAs(it) }
            config.maxCtas?.let { struct.maxCTAs(it) }
            config.cgaClusterSize?.let { struct.cgaClusterSize(it) }
            config.splitShare?.let { struct.splitShare(if (it) 1 else 0) }
        }
    }
}
