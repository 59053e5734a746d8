package dev.tpcomm.rccl

import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.gpu.NcclApi
import dev.tpcomm.gpu.NcclCommConfig
import dev.tpcomm.gpu.NcclConnector
import dev.tpcomm.gpu.NcclResult
import java.lang.foreign.Arena
import java.lang.foreign.FunctionDescriptor
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.lang.foreign.ValueLayout.ADDRESS
import java.lang.foreign.ValueLayout.JAVA_INT
import java.lang.foreign.ValueLayout.JAVA_LONG
import java.lang.invoke.MethodHandle

/**
 * [NcclApi] over RCCL (`librccl.so`), which exports NCCL's C API under NCCL's names, through
 * `java.lang.foreign` downcalls. Constructing it opens the library (from `TPCOMM_RCCL_LIBRARY`, the
 * loader's path, `$ROCM_PATH/lib` or `/opt/rocm/lib`) and resolves the symbols every supported
 * release has, so a missing library or core symbol fails at once with [UnsatisfiedLinkError].
 * Functions newer than that core (`ncclCommSplit`, `ncclCommFinalize`, `ncclGetLastError`) are
 * resolved on first use: a release without them still loads, its version is then refused by the
 * engine (ROCm 6.0 / NCCL API 2.18 minimum) with a clear message rather than a link error, and a
 * call to one that is missing returns `ncclInvalidUsage`. Thread-safe as RCCL is.
 *
 * The same binding opens NVIDIA's `libnccl.so.2` ([nvidia]), whose C API RCCL copies: the GPU check
 * runs the engine over it and the CUDA runtime ([FfmDeviceRuntime.cuda]) on NVIDIA machines.
 *
 * A raw native seam: its methods call the library directly (`ncclCommAbort`, `ncclGroupStart`, frees
 * of device memory) outside the engine's ordering, so it needs the [InternalTpcommApi] opt-in. Users
 * get it through `Comm.create("rccl")`, never by constructing it.
 */
@InternalTpcommApi
public class RcclLibrary internal constructor(private val lib: NativeLibrary, private val name: String = "RCCL") : NcclApi {
    /** Opens RCCL from the usual places (see the class KDoc). */
    public constructor() : this(NativeLibrary("RCCL (librccl.so)", NativeLibrary.candidates("TPCOMM_RCCL_LIBRARY", "librccl.so", "librccl.so.1")))

    /** Where the library was loaded from. */
    public val loadedFrom: String get() = lib.loadedFrom

    override val libraryName: String get() = name

    /**
     * False on RCCL: its `ncclFp8E4M3`/`ncclFp8E5M2` are `rccl_float8`/`rccl_bfloat8`, FNUZ formats
     * (ROCm/rccl `src/include/rccl_float8.h`). True on NVIDIA's `libnccl.so.2` opened by [nvidia]: its
     * FP8 types are the OCP `__nv_fp8_e4m3`/`__nv_fp8_e5m2` (NVIDIA/nccl `src/nccl.h.in`), and the GPU
     * check's FP8 cases over this binding would otherwise fail by construction (issue 35).
     */
    override val float8IsOcp: Boolean get() = name == "NCCL"

    private fun f(name: String, ret: ValueLayout?, vararg args: java.lang.foreign.MemoryLayout): MethodHandle =
        lib.function(name, if (ret == null) FunctionDescriptor.ofVoid(*args) else FunctionDescriptor.of(ret, *args))

    private val getVersion = f("ncclGetVersion", JAVA_INT, ADDRESS)
    private val getUniqueId = f("ncclGetUniqueId", JAVA_INT, ADDRESS)
    private val commInitRankConfig = f("ncclCommInitRankConfig", JAVA_INT, ADDRESS, JAVA_INT, RcclAbi.UNIQUE_ID_LAYOUT, JAVA_INT, ADDRESS)
    private val commSplit by lazy { lib.optionalFunction("ncclCommSplit", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, JAVA_INT, ADDRESS, ADDRESS)) }
    private val commFinalize by lazy { lib.optionalFunction("ncclCommFinalize", FunctionDescriptor.of(JAVA_INT, ADDRESS)) }
    private val commAbort = f("ncclCommAbort", JAVA_INT, ADDRESS)
    private val commDestroy = f("ncclCommDestroy", JAVA_INT, ADDRESS)
    private val commGetAsyncError = f("ncclCommGetAsyncError", JAVA_INT, ADDRESS, ADDRESS)
    private val commCount = f("ncclCommCount", JAVA_INT, ADDRESS, ADDRESS)
    private val commUserRank = f("ncclCommUserRank", JAVA_INT, ADDRESS, ADDRESS)
    private val allReduce = f("ncclAllReduce", JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, JAVA_INT, JAVA_INT, ADDRESS, ADDRESS)
    private val broadcast = f("ncclBroadcast", JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, JAVA_INT, JAVA_INT, ADDRESS, ADDRESS)
    private val reduce = f("ncclReduce", JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, JAVA_INT, JAVA_INT, JAVA_INT, ADDRESS, ADDRESS)
    private val allGather = f("ncclAllGather", JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, JAVA_INT, ADDRESS, ADDRESS)
    private val reduceScatter = f("ncclReduceScatter", JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, JAVA_INT, JAVA_INT, ADDRESS, ADDRESS)
    private val redOpCreatePreMulSum = f("ncclRedOpCreatePreMulSum", JAVA_INT, ADDRESS, ADDRESS, JAVA_INT, JAVA_INT, ADDRESS)
    private val redOpDestroy = f("ncclRedOpDestroy", JAVA_INT, JAVA_INT, ADDRESS)
    private val send = f("ncclSend", JAVA_INT, ADDRESS, JAVA_LONG, JAVA_INT, JAVA_INT, ADDRESS, ADDRESS)
    private val recv = f("ncclRecv", JAVA_INT, ADDRESS, JAVA_LONG, JAVA_INT, JAVA_INT, ADDRESS, ADDRESS)
    private val groupStart = f("ncclGroupStart", JAVA_INT)
    private val groupEnd = f("ncclGroupEnd", JAVA_INT)
    private val getErrorString = f("ncclGetErrorString", ADDRESS, JAVA_INT)
    private val getLastError by lazy { lib.optionalFunction("ncclGetLastError", FunctionDescriptor.of(ADDRESS, ADDRESS)) }

    internal companion object {
        /** NVIDIA's NCCL (`TPCOMM_NCCL_LIBRARY`, then `libnccl.so.2` from the loader's path), through this same binding. */
        fun nvidia(): RcclLibrary = RcclLibrary(
            NativeLibrary("NCCL (libnccl.so.2)", listOfNotNull(System.getenv("TPCOMM_NCCL_LIBRARY")?.takeIf { it.isNotBlank() }, "libnccl.so.2", "libnccl.so")),
            "NCCL",
        )
    }

    /** Whether the library exports [symbol] (resolved lazily; for tests and diagnostics). */
    internal fun has(symbol: String): Boolean = when (symbol) {
        "ncclCommSplit" -> commSplit != null
        "ncclCommFinalize" -> commFinalize != null
        "ncclGetLastError" -> getLastError != null
        else -> true
    }

    private fun p(address: Long): MemorySegment = MemorySegment.ofAddress(address)

    override fun getVersion(version: IntArray): Int = Arena.ofConfined().use { a ->
        val out = a.allocate(JAVA_INT)
        val rc = getVersion.invokeExact(out) as Int
        version[0] = out.get(JAVA_INT, 0)
        rc
    }

    override fun getUniqueId(uniqueId: ByteArray): Int = Arena.ofConfined().use { a ->
        require(uniqueId.size == NcclConnector.UNIQUE_ID_BYTES) { "an ncclUniqueId has ${NcclConnector.UNIQUE_ID_BYTES} bytes" }
        val id = a.allocate(RcclAbi.UNIQUE_ID_LAYOUT)
        val rc = getUniqueId.invokeExact(id) as Int
        MemorySegment.copy(id, ValueLayout.JAVA_BYTE, 0, uniqueId, 0, uniqueId.size)
        rc
    }

    override fun commInitRankConfig(comm: MemorySegment, nranks: Int, uniqueId: ByteArray, rank: Int, config: NcclCommConfig): Int =
        Arena.ofConfined().use { a ->
            val id = a.allocate(RcclAbi.UNIQUE_ID_LAYOUT)
            MemorySegment.copy(uniqueId, 0, id, ValueLayout.JAVA_BYTE, 0, uniqueId.size)
            // [comm] is the engine's cell, alive until the communicator is ready (RCCL's init job may write it later).
            commInitRankConfig.invokeExact(comm, nranks, id, rank, RcclAbi.config(config, a)) as Int
        }

    override fun commSplit(comm: Long, color: Int, key: Int, newComm: MemorySegment, config: NcclCommConfig?): Int {
        val h = commSplit ?: return NcclResult.INVALID_USAGE
        // The config is read during the call only; [newComm] is written by RCCL's split job later.
        return Arena.ofConfined().use { a ->
            val cfg = config?.let { RcclAbi.config(it, a) } ?: MemorySegment.NULL
            h.invokeExact(p(comm), color, key, newComm, cfg) as Int
        }
    }

    override fun commFinalize(comm: Long): Int {
        val h = commFinalize ?: return NcclResult.INVALID_USAGE
        return h.invokeExact(p(comm)) as Int
    }

    override fun commAbort(comm: Long): Int = commAbort.invokeExact(p(comm)) as Int

    override fun commDestroy(comm: Long): Int = commDestroy.invokeExact(p(comm)) as Int

    override fun commGetAsyncError(comm: Long, asyncError: IntArray): Int = intOut(asyncError) { commGetAsyncError.invokeExact(p(comm), it) as Int }

    override fun commCount(comm: Long, count: IntArray): Int = intOut(count) { commCount.invokeExact(p(comm), it) as Int }

    override fun commUserRank(comm: Long, rank: IntArray): Int = intOut(rank) { commUserRank.invokeExact(p(comm), it) as Int }

    override fun allReduce(sendBuf: Long, recvBuf: Long, count: Long, datatype: Int, op: Int, comm: Long, stream: Long): Int =
        allReduce.invokeExact(p(sendBuf), p(recvBuf), count, datatype, op, p(comm), p(stream)) as Int

    override fun broadcast(sendBuf: Long, recvBuf: Long, count: Long, datatype: Int, root: Int, comm: Long, stream: Long): Int =
        broadcast.invokeExact(p(sendBuf), p(recvBuf), count, datatype, root, p(comm), p(stream)) as Int

    override fun reduce(sendBuf: Long, recvBuf: Long, count: Long, datatype: Int, op: Int, root: Int, comm: Long, stream: Long): Int =
        reduce.invokeExact(p(sendBuf), p(recvBuf), count, datatype, op, root, p(comm), p(stream)) as Int

    override fun allGather(sendBuf: Long, recvBuf: Long, sendCount: Long, datatype: Int, comm: Long, stream: Long): Int =
        allGather.invokeExact(p(sendBuf), p(recvBuf), sendCount, datatype, p(comm), p(stream)) as Int

    override fun reduceScatter(sendBuf: Long, recvBuf: Long, recvCount: Long, datatype: Int, op: Int, comm: Long, stream: Long): Int =
        reduceScatter.invokeExact(p(sendBuf), p(recvBuf), recvCount, datatype, op, p(comm), p(stream)) as Int

    override fun redOpCreatePreMulSum(op: IntArray, scalar: MemorySegment, datatype: Int, residence: Int, comm: Long): Int =
        intOut(op) { redOpCreatePreMulSum.invokeExact(it, scalar, datatype, residence, p(comm)) as Int }

    override fun redOpDestroy(op: Int, comm: Long): Int = redOpDestroy.invokeExact(op, p(comm)) as Int

    override fun send(sendBuf: Long, count: Long, datatype: Int, peer: Int, comm: Long, stream: Long): Int =
        send.invokeExact(p(sendBuf), count, datatype, peer, p(comm), p(stream)) as Int

    override fun recv(recvBuf: Long, count: Long, datatype: Int, peer: Int, comm: Long, stream: Long): Int =
        recv.invokeExact(p(recvBuf), count, datatype, peer, p(comm), p(stream)) as Int

    override fun groupStart(): Int = groupStart.invokeExact() as Int

    override fun groupEnd(): Int = groupEnd.invokeExact() as Int

    override fun getErrorString(result: Int): String = cString(getErrorString.invokeExact(result) as MemorySegment) ?: "unknown"

    override fun getLastError(comm: Long): String? = getLastError?.let { cString(it.invokeExact(p(comm)) as MemorySegment) }

    private inline fun intOut(out: IntArray, call: (MemorySegment) -> Int): Int = Arena.ofConfined().use { a ->
        val s = a.allocate(JAVA_INT)
        val rc = call(s)
        out[0] = s.get(JAVA_INT, 0)
        rc
    }
}

/** The NUL-terminated string at [p], or null for NULL. */
internal fun cString(p: MemorySegment): String? = if (p.address() == 0L) null else p.reinterpret(Long.MAX_VALUE).getString(0)
