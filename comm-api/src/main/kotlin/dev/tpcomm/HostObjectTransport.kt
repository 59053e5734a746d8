package dev.tpcomm

import dev.tpcomm.spi.ObjectTransport
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

/**
 * The default [ObjectTransport]: byte tensors in host memory through [comm]'s own collectives and
 * messages (the local and MPI backends). Rows are two-dimensional tensors (`[1, size]`, gathered
 * into `[worldSize, size]`), so `worldSize` x size may exceed an `Int`.
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

    override suspend fun allGather(operation: String, bytes: ByteArray): List<ByteArray> =
        rows(comm.allGather(tensorOf(bytes)), bytes.size)

    override suspend fun broadcast(operation: String, bytes: ByteArray, root: Int): ByteArray =
        rows(comm.broadcast(tensorOf(bytes), root), bytes.size)[0]

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
