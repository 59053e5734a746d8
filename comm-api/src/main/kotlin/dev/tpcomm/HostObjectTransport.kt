package dev.tpcomm

import dev.tpcomm.spi.ObjectTransport
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

/**
 * The default [ObjectTransport]: byte tensors in host memory through [comm]'s own collectives and
 * messages (the local and MPI backends): lengths as `Int64` tensors, bytes as `UInt8` tensors
 * (a gather's and a scatter's rows two-dimensional, `[1, size]` into `[worldSize, size]`, so that
 * `worldSize` x size may exceed an `Int`).
 */
internal class HostObjectTransport(private val comm: Communicator) : ObjectTransport {
    private fun tensorOf(bytes: ByteArray): Tensor {
        val t = Tensor.zeros(DType.UInt8, 1, bytes.size)
        MemorySegment.copy(bytes, 0, t.segment, ValueLayout.JAVA_BYTE, 0, bytes.size)
        return t
    }

    private fun rows(t: Tensor, size: Int): List<ByteArray> = List(t.shape[0]) { r ->
        ByteArray(size).also { MemorySegment.copy(t.segment, ValueLayout.JAVA_BYTE, r.toLong() * size, it, 0, size) }
    }

    override suspend fun allGatherLength(operation: String, length: Long): LongArray =
        comm.allGather(Tensor.of(longArrayOf(length))).toLongArray()

    override suspend fun broadcastLengths(operation: String, lengths: LongArray, root: Int): LongArray =
        comm.broadcast(Tensor.of(lengths), root).toLongArray()

    override suspend fun sendLength(operation: String, length: Long, dst: Int, tag: Int) {
        comm.send(Tensor.of(longArrayOf(length)), dst, tag)
    }

    override suspend fun recvLength(operation: String, src: Int, tag: Int): Pair<Long, MessageInfo> {
        val t = Tensor.zeros(DType.Int64, 1)
        val info = comm.recv(t, src, tag)
        return t.getLong(0) to info
    }

    /** One-dimensional rows, gathered into `worldSize` x size bytes (the wire format of allGatherObject since it exists). */
    override suspend fun allGather(operation: String, bytes: ByteArray): List<ByteArray> {
        val t = Tensor.zeros(DType.UInt8, bytes.size)
        MemorySegment.copy(bytes, 0, t.segment, ValueLayout.JAVA_BYTE, 0, bytes.size)
        val all = comm.allGather(t)
        return List(comm.worldSize) { r ->
            ByteArray(bytes.size).also { MemorySegment.copy(all.segment, ValueLayout.JAVA_BYTE, r.toLong() * bytes.size, it, 0, bytes.size) }
        }
    }

    override suspend fun broadcast(operation: String, bytes: ByteArray, root: Int): ByteArray {
        val t = Tensor.zeros(DType.UInt8, bytes.size)
        MemorySegment.copy(bytes, 0, t.segment, ValueLayout.JAVA_BYTE, 0, bytes.size)
        comm.broadcast(t, root)
        return t.segment.toArray(ValueLayout.JAVA_BYTE)
    }

    override suspend fun gather(operation: String, bytes: ByteArray, root: Int): List<ByteArray>? =
        comm.gather(tensorOf(bytes), root)?.let { rows(it, bytes.size) }

    override suspend fun scatter(operation: String, rows: List<ByteArray>?, size: Int, root: Int): ByteArray {
        val input = rows?.let { all ->
            Tensor.zeros(DType.UInt8, all.size, size).also { t ->
                for ((r, row) in all.withIndex()) MemorySegment.copy(row, 0, t.segment, ValueLayout.JAVA_BYTE, r.toLong() * size, row.size)
            }
        }
        val output = Tensor.zeros(DType.UInt8, 1, size)
        comm.scatter(output, input, root)
        return rows(output, size)[0]
    }

    override suspend fun send(operation: String, bytes: ByteArray, dst: Int, tag: Int) {
        comm.send(tensorOf(bytes), dst, tag)
    }

    override suspend fun recv(operation: String, size: Int, src: Int, tag: Int): Pair<ByteArray, MessageInfo> {
        val t = Tensor.zeros(DType.UInt8, 1, size)
        val info = comm.recv(t, src, tag)
        return rows(t, size)[0] to info
    }
}
