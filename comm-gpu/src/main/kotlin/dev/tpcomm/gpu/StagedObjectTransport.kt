package dev.tpcomm.gpu

import dev.tpcomm.MessageInfo
import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.spi.ObjectTransport
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

/**
 * The object operations' bytes (the front runs them, [dev.tpcomm.spi.ObjectProtocol]: lengths
 * first, checked, then the padded payloads), moved through temporary device buffers on the
 * communicator's stream: the only host staging the GPU engine does. A gather and a scatter are a
 * grouped `ncclSend`/`ncclRecv` of the padded bytes; an object message is two messages, length then
 * bytes, each staged and sent in a group of its own: unlike a tensor send, each completes only when
 * its peer receives it and holds the device's thread meanwhile; tag 0 only, no `ANY_SOURCE`.
 *
 * Role: the [ObjectTransport] of one [NcclCommunicator]; each step runs as an operation the
 * communicator records and issues ([Operations]). Thread-safety: any thread or coroutine (each
 * step's device part runs on the native thread). Lifetime: created and owned by the communicator.
 */
internal class StagedObjectTransport(
    private val rank: Int,
    private val worldSize: Int,
    private val ops: Operations,
) : ObjectTransport {
    /** How the transport's steps become recorded operations of the communicator, issued in call order. */
    interface Operations {
        /** A collective step named [operation] (root [root], or [FlightRecorder.NONE]) whose device part is [body]. */
        suspend fun <T> collective(operation: String, root: Int, body: NcclOp.() -> T): T

        /** A point-to-point step named [operation] with [peer] whose device part is [body]. */
        suspend fun <T> pointToPoint(operation: String, peer: Int, tag: Int, body: NcclOp.() -> T): T
    }

    override suspend fun allGatherLength(operation: String, length: Long): LongArray =
        allGather(operation, longBytes(length)).map { longsOf(it)[0] }.toLongArray()

    override suspend fun broadcastLengths(operation: String, lengths: LongArray, root: Int): LongArray =
        longsOf(broadcast(operation, longBytes(*lengths), root))

    override suspend fun sendLength(operation: String, length: Long, dst: Int, tag: Int) {
        send(operation, longBytes(length), dst, tag)
    }

    override suspend fun recvLength(operation: String, src: Int, tag: Int): Pair<Long, MessageInfo> =
        recv(operation, 8, src, tag).let { (bytes, info) -> longsOf(bytes)[0] to info }

    override suspend fun allGather(operation: String, bytes: ByteArray): List<ByteArray> {
        val all = stagedAllGather(operation, bytes)
        return List(worldSize) { r -> all.copyOfRange(r * bytes.size, (r + 1) * bytes.size) }
    }

    override suspend fun broadcast(operation: String, bytes: ByteArray, root: Int): ByteArray = stagedBroadcast(operation, bytes, root)

    override suspend fun gather(operation: String, bytes: ByteArray, root: Int): List<ByteArray>? = ops.collective(operation, root) {
        val n = bytes.size.toLong()
        val dev = temp(n * worldSize)
        val seg = staging(n * worldSize)
        MemorySegment.copy(bytes, 0, seg, ValueLayout.JAVA_BYTE, rank * n, bytes.size)
        cuda(runtime.memcpyAsync(dev + rank * n, seg.address() + rank * n, n, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, stream), "memcpyAsync")
        group {
            if (rank == root) {
                for (r in 0 until worldSize) if (r != rank) nccl(api.recv(dev + r * n, n, BYTES, r, comm, stream), "ncclRecv")
            } else {
                nccl(api.send(dev + rank * n, n, BYTES, root, comm, stream), "ncclSend")
            }
        }
        if (rank == root) cuda(runtime.memcpyAsync(seg.address(), dev, n * worldSize, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, stream), "memcpyAsync")
        awaitStream()
        if (rank == root) List(worldSize) { r -> seg.asSlice(r * n, n).toArray(ValueLayout.JAVA_BYTE) } else null
    }

    override suspend fun scatter(operation: String, rows: List<ByteArray>?, size: Int, root: Int): ByteArray = ops.collective(operation, root) {
        val n = size.toLong()
        val dev = temp(n * worldSize)
        val seg = staging(n * worldSize)
        if (rank == root) {
            for ((r, row) in rows!!.withIndex()) MemorySegment.copy(row, 0, seg, ValueLayout.JAVA_BYTE, r * n, row.size)
            cuda(runtime.memcpyAsync(dev, seg.address(), n * worldSize, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, stream), "memcpyAsync")
        }
        group {
            if (rank == root) {
                for (r in 0 until worldSize) if (r != rank) nccl(api.send(dev + r * n, n, BYTES, r, comm, stream), "ncclSend")
            } else {
                nccl(api.recv(dev + rank * n, n, BYTES, root, comm, stream), "ncclRecv")
            }
        }
        cuda(runtime.memcpyAsync(seg.address(), dev + rank * n, n, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, stream), "memcpyAsync")
        awaitStream()
        seg.asSlice(0, n).toArray(ValueLayout.JAVA_BYTE)
    }

    override suspend fun send(operation: String, bytes: ByteArray, dst: Int, tag: Int) {
        ops.pointToPoint(operation, dst, tag) {
            thread.p2pOwner?.endP2pWindow()
            val n = bytes.size.toLong()
            val dev = temp(n)
            val seg = staging(n)
            MemorySegment.copy(bytes, 0, seg, ValueLayout.JAVA_BYTE, 0, bytes.size)
            cuda(runtime.memcpyAsync(dev, seg.address(), n, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, stream), "memcpyAsync")
            group { nccl(api.send(dev, n, BYTES, dst, comm, stream), "ncclSend") }
            awaitStream()
        }
    }

    override suspend fun recv(operation: String, size: Int, src: Int, tag: Int): Pair<ByteArray, MessageInfo> {
        val bytes = ops.pointToPoint(operation, src, tag) {
            thread.p2pOwner?.endP2pWindow()
            val n = size.toLong()
            val dev = temp(n)
            val seg = staging(n)
            group { nccl(api.recv(dev, n, BYTES, src, comm, stream), "ncclRecv") }
            cuda(runtime.memcpyAsync(seg.address(), dev, n, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, stream), "memcpyAsync")
            awaitStream()
            seg.asSlice(0, n).toArray(ValueLayout.JAVA_BYTE)
        }
        return bytes to MessageInfo(src, 0, size.toLong())
    }

    private suspend fun stagedAllGather(name: String, bytes: ByteArray): ByteArray = ops.collective(name, FlightRecorder.NONE) {
        val n = bytes.size.toLong()
        val seg = staging(n * worldSize)
        MemorySegment.copy(bytes, 0, seg, ValueLayout.JAVA_BYTE, 0, bytes.size)
        val dev = temp(n * worldSize)
        cuda(runtime.memcpyAsync(dev + rank * n, seg.address(), n, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, stream), "memcpyAsync")
        nccl(api.allGather(dev + rank * n, dev, n, BYTES, comm, stream), "ncclAllGather")
        cuda(runtime.memcpyAsync(seg.address(), dev, n * worldSize, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, stream), "memcpyAsync")
        awaitStream()
        seg.asSlice(0, n * worldSize).toArray(ValueLayout.JAVA_BYTE)
    }

    private suspend fun stagedBroadcast(name: String, bytes: ByteArray, root: Int): ByteArray = ops.collective(name, root) {
        val n = bytes.size.toLong()
        val seg = staging(n)
        MemorySegment.copy(bytes, 0, seg, ValueLayout.JAVA_BYTE, 0, bytes.size)
        val dev = temp(n)
        if (rank == root) cuda(runtime.memcpyAsync(dev, seg.address(), n, DeviceRuntime.MEMCPY_HOST_TO_DEVICE, stream), "memcpyAsync")
        nccl(api.broadcast(dev, dev, n, BYTES, root, comm, stream), "ncclBroadcast")
        cuda(runtime.memcpyAsync(seg.address(), dev, n, DeviceRuntime.MEMCPY_DEVICE_TO_HOST, stream), "memcpyAsync")
        awaitStream()
        seg.asSlice(0, n).toArray(ValueLayout.JAVA_BYTE)
    }

    private companion object {
        fun longBytes(vararg values: Long): ByteArray =
            java.nio.ByteBuffer.allocate(8 * values.size).also { b -> values.forEach { b.putLong(it) } }.array()

        fun longsOf(bytes: ByteArray): LongArray = java.nio.ByteBuffer.wrap(bytes).let { b -> LongArray(bytes.size / 8) { b.getLong() } }
    }
}
