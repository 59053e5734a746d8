@file:JvmName("TensorFusion")

package dev.tpcomm.coroutines

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.spi.CollectiveChecks
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope
import java.lang.foreign.MemorySegment

/** Default fusion buffer size of [allReduceCoalesced]: 64 MiB, Horovod's default fusion threshold. */
public const val DEFAULT_FUSION_THRESHOLD_BYTES: Long = 64L shl 20

/**
 * All-reduces many tensors with few collectives (tensor fusion, as Horovod does): tensors are
 * grouped by dtype, packed in order into buckets of at most [thresholdBytes], each bucket is
 * all-reduced with [op] as one flat tensor, and the results are copied back. Returns [tensors],
 * each reduced in place, in the order given.
 *
 * - Packing is decided from the dtypes and sizes alone, so ranks passing matching lists run the
 *   same collectives in the same order; lists that differ across ranks fail as mismatched
 *   collectives.
 * - A tensor of [thresholdBytes] or more, and a bucket that would hold a single tensor, is
 *   reduced alone in place, with no copy. Empty tensors are skipped. Device (GPU) tensors cannot
 *   be packed on the host and are each reduced alone.
 * - Buckets are issued in the order of their first tensor in [tensors], all before the first is
 *   awaited, so packing bucket `k + 1` overlaps bucket `k`'s reduction.
 *
 * Arguments are checked before any data moves: every tensor on [Communicator.device] and open, [op]
 * defined on every dtype, no tensor given twice or overlapping another in memory; otherwise
 * [IllegalArgumentException] with the tensors left unchanged. If a collective fails, its
 * exception is thrown, the other buckets are cancelled (the communicator is aborted in any case),
 * and tensors whose bucket had not been copied back keep their original values; fusion buffers
 * are then left to the garbage collector rather than freed while a backend might still use them.
 *
 * @throws IllegalArgumentException on bad arguments, as above, or if [thresholdBytes] < 1.
 */
public suspend fun Communicator.allReduceCoalesced(
    tensors: List<Tensor>,
    op: ReduceOp = ReduceOp.Sum,
    thresholdBytes: Long = DEFAULT_FUSION_THRESHOLD_BYTES,
): List<Tensor> {
    require(thresholdBytes >= 1) { "allReduceCoalesced: thresholdBytes must be >= 1, got $thresholdBytes" }
    checkFusionArguments(tensors, op)
    val plan = FusionPlan.of(tensors, thresholdBytes)
    coroutineScope {
        val handles = plan.buckets.map { bucket ->
            val buffer = bucket.pack()
            bucket to async(start = CoroutineStart.UNDISPATCHED) { allReduce(buffer, op) }
        }
        for ((bucket, handle) in handles) {
            val reduced = handle.await()
            bucket.unpack(reduced)
        }
    }
    return tensors
}

private fun Communicator.checkFusionArguments(tensors: List<Tensor>, op: ReduceOp) {
    val operation = "allReduceCoalesced"
    tensors.forEachIndexed { i, t ->
        require(!t.isClosed) { "$operation: tensor $i was closed; pass open tensors" }
        CollectiveChecks.device(t, device, "$operation (tensor $i)")
        CollectiveChecks.op(op, t.dtype, "$operation (tensor $i)")
    }
    // Overlapping buffers would be reduced twice or written back twice: reject them.
    val host = tensors.withIndex().filter { !it.value.device.isGpu && it.value.byteSize > 0 }
        .sortedBy { it.value.address }
    for (k in 1 until host.size) {
        val prev = host[k - 1]
        val cur = host[k]
        require(cur.value.address >= prev.value.address + prev.value.byteSize) {
            "$operation: tensors ${minOf(prev.index, cur.index)} and ${maxOf(prev.index, cur.index)} overlap in memory " +
                "(the same tensor or views of one buffer); pass each buffer once"
        }
    }
}

/** How [allReduceCoalesced] groups tensors: a pure function of dtypes, sizes and the threshold. */
internal class FusionPlan(val buckets: List<Bucket>) {
    /** Tensors reduced together: one alone in place, or several packed into a fresh buffer. */
    class Bucket(val dtype: DType, val members: List<Tensor>) {
        val numel: Long = members.sumOf { it.numel }
        val isFused: Boolean get() = members.size > 1

        /** The tensor to reduce: the member itself, or a new flat buffer holding the members' bytes in order. */
        fun pack(): Tensor {
            if (!isFused) return members[0]
            val buffer = Tensor.zeros(dtype, numel.toInt())
            val dst = buffer.segment
            var offset = 0L
            for (t in members) {
                MemorySegment.copy(t.segment, 0, dst, offset, t.byteSize)
                offset += t.byteSize
            }
            return buffer
        }

        /** Copies the reduced [buffer] back into the members and frees it. */
        fun unpack(buffer: Tensor) {
            if (!isFused) return
            val src = buffer.segment
            var offset = 0L
            for (t in members) {
                MemorySegment.copy(src, offset, t.segment, 0, t.byteSize)
                offset += t.byteSize
            }
            buffer.close()
        }
    }

    companion object {
        fun of(tensors: List<Tensor>, thresholdBytes: Long): FusionPlan {
            val buckets = ArrayList<Pair<Int, Bucket>>()   // (position of the first member, bucket)
            // Group by dtype; within a dtype keep the given order.
            val byDtype = LinkedHashMap<DType, MutableList<IndexedValue<Tensor>>>()
            for ((i, t) in tensors.withIndex()) if (t.numel > 0) byDtype.getOrPut(t.dtype) { ArrayList() } += IndexedValue(i, t)
            for ((dtype, list) in byDtype) {
                // A fused buffer is one tensor, whose element count must fit in an Int.
                val limit = minOf(thresholdBytes, Int.MAX_VALUE.toLong() * dtype.byteSize)
                var current = ArrayList<IndexedValue<Tensor>>()
                var currentBytes = 0L
                fun flush() {
                    if (current.isNotEmpty()) buckets += current[0].index to Bucket(dtype, current.map { it.value })
                    current = ArrayList()
                    currentBytes = 0
                }
                for (item in list) {
                    val t = item.value
                    if (t.device.isGpu || t.byteSize >= limit) {
                        buckets += item.index to Bucket(dtype, listOf(t))
                        continue
                    }
                    if (currentBytes + t.byteSize > limit) flush()
                    current += item
                    currentBytes += t.byteSize
                }
                flush()
            }
            // Issue buckets in the order their first tensor was given (the order gradients become ready).
            buckets.sortBy { it.first }
            return FusionPlan(buckets.map { it.second })
        }
    }
}
