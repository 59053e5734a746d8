package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.Tensor
import io.mockk.every
import io.mockk.mockk
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.util.concurrent.atomic.AtomicLong
import kotlin.time.Duration
import kotlin.time.Duration.Companion.seconds

/** MockK doubles of both seams, answering success by default, and a way to connect the engine to them. */
class MockPlatform(val version: Int = 23007) {
    val api: NcclApi = mockk()
    val runtime: DeviceRuntime = mockk()
    private val nextPtr = AtomicLong(TEMP_BASE)
    private val nextEvent = AtomicLong(EVENT)

    init {
        every { api.libraryName } returns "NCCL"
        every { api.getVersion(any()) } answers { firstArg<IntArray>()[0] = version; 0 }
        every { api.getUniqueId(any()) } answers { firstArg<ByteArray>().fill(7); 0 }
        every { api.commInitRankConfig(any(), any(), any(), any(), any()) } answers { firstArg<MemorySegment>().set(ValueLayout.JAVA_LONG, 0, COMM); 0 }
        every { api.commGetAsyncError(any(), any()) } answers { secondArg<IntArray>()[0] = 0; 0 }
        every { api.getErrorString(any()) } answers { "error text ${firstArg<Int>()}" }
        every { api.getLastError(any()) } returns null
        every { api.getEnv(any()) } returns null
        every { api.commAbort(any()) } returns 0
        every { api.commDestroy(any()) } returns 0
        every { api.commCount(any(), any()) } answers { secondArg<IntArray>()[0] = 1; 0 }
        every { api.commUserRank(any(), any()) } answers { secondArg<IntArray>()[0] = 0; 0 }
        every { api.allReduce(any(), any(), any(), any(), any(), any(), any()) } returns 0
        every { api.broadcast(any(), any(), any(), any(), any(), any(), any()) } returns 0
        every { api.reduce(any(), any(), any(), any(), any(), any(), any(), any()) } returns 0
        every { api.allGather(any(), any(), any(), any(), any(), any()) } returns 0
        every { api.reduceScatter(any(), any(), any(), any(), any(), any(), any()) } returns 0
        every { api.redOpCreatePreMulSum(any(), any(), any(), any(), any()) } answers { firstArg<IntArray>()[0] = PREMUL_OP; 0 }
        every { api.redOpDestroy(any(), any()) } returns 0
        every { api.send(any(), any(), any(), any(), any(), any()) } returns 0
        every { api.recv(any(), any(), any(), any(), any(), any()) } returns 0
        every { api.groupStart() } returns 0
        every { api.groupEnd() } returns 0
        every { api.commSplit(any(), any(), any(), any(), any()) } answers { arg<MemorySegment>(3).set(ValueLayout.JAVA_LONG, 0, CHILD); 0 }
        every { api.commFinalize(any()) } returns 0
        every { runtime.platformName } returns "CUDA"
        every { runtime.setDevice(any()) } returns 0
        every { runtime.getDeviceCount(any()) } answers { firstArg<IntArray>()[0] = 1; 0 }
        every { runtime.streamCreateNonBlocking(any()) } answers { firstArg<LongArray>()[0] = STREAM; 0 }
        every { runtime.streamDestroy(any()) } returns 0
        every { runtime.eventCreateDisableTiming(any()) } answers { firstArg<LongArray>()[0] = nextEvent.getAndAdd(16); 0 }
        every { runtime.eventDestroy(any()) } returns 0
        every { runtime.eventRecord(any(), any()) } returns 0
        every { runtime.eventQuery(any()) } returns 0
        // The close of a communicator that staged through page-locked memory waits for its stream's last event on a
        // short-lived thread, then frees the memory there (StreamResources.freeHostAfterStream): every event is complete.
        every { runtime.eventSynchronize(any()) } returns 0
        every { runtime.malloc(any(), any()) } answers { firstArg<LongArray>()[0] = nextPtr.getAndAdd(0x10000); 0 }
        every { runtime.free(any()) } returns 0
        every { runtime.getDevice(any()) } answers { firstArg<IntArray>()[0] = 0; 0 }
        every { runtime.mallocAsync(any(), any(), any()) } answers { firstArg<LongArray>()[0] = nextPtr.getAndAdd(0x10000); 0 }
        every { runtime.freeAsync(any(), any()) } returns 0
        every { runtime.hostAlloc(any(), any()) } answers { firstArg<LongArray>()[0] = HOST.allocate(secondArg<Long>().coerceAtLeast(1), 8).address(); 0 }
        every { runtime.freeHost(any()) } returns 0
        every { runtime.streamWaitEvent(any(), any()) } returns 0
        every { runtime.memcpyAsync(any(), any(), any(), any(), any()) } returns 0
        every { runtime.memcpy2DAsync(any(), any(), any(), any(), any(), any(), any(), any()) } returns 0
        every { runtime.getErrorString(any()) } answers { "cuda error ${firstArg<Int>()}" }
    }

    suspend fun connect(worldSize: Int = 1, rank: Int = 0, timeout: Duration = 5.seconds, creationTimeout: Duration? = null): NcclCommunicator =
        NcclConnector.connect(
            api, runtime, Device.Cuda(0), CommConfig(worldSize = worldSize, rank = rank, timeout = timeout, creationTimeout = creationTimeout),
            { _, id -> id ?: ByteArray(NcclConnector.UNIQUE_ID_BYTES) }, "nccl",
        )

    companion object {
        const val COMM = 0xC0001L
        const val CHILD = 0xC0002L
        /** The handle the mocked `ncclRedOpCreatePreMulSum` returns. */
        const val PREMUL_OP = 0x1234
        const val STREAM = 0x5000L
        const val EVENT = 0xE000L
        const val TEMP_BASE = 0x7000_0000L
        const val A = 0x1000_0000L
        const val B = 0x2000_0000L
        /** Real host memory behind the mocked `hostAlloc`, so staged bytes can be read back. */
        val HOST: Arena = Arena.ofAuto()

        fun dev(address: Long, dtype: DType, vararg shape: Int): Tensor = Tensor.wrapDevice(Device.Cuda(0), address, dtype, *shape)
    }
}
