package dev.tpcomm.coroutines.local

import dev.tpcomm.ReduceOp
import dev.tpcomm.engine.ExactReduction
import dev.tpcomm.engine.ExactSum
import java.lang.foreign.MemorySegment

/**
 * The data movement of a collective, run by its last arriver once every rank's signature matched.
 *
 * Reductions read every rank's buffer once and write each output once, straight between the
 * ranks' segments. Copies (broadcast, gathers, scatter, all-to-all) go segment to segment. Work
 * above [PARALLEL_BYTES] is cut into pieces run in parallel ([ParallelWork]); below it one thread
 * does it all without allocating.
 */
internal object CollectiveExecution {
    /** Bytes touched (inputs read) above which work is split across threads. `-Dtpcomm.local.parallelBytes` overrides. */
    val PARALLEL_BYTES: Long = java.lang.Long.getLong("tpcomm.local.parallelBytes", 1L shl 20)
    private const val REDUCE_CHUNK = 16384L
    private const val COPY_CHUNK = 256L * 1024

    fun execute(s: OpSlot, w: Int, group: LocalGroup) {
        when (val k = s.kinds[0]) {
            OpKind.ALL_REDUCE, OpKind.REDUCE -> reduceInPlace(s, w, k == OpKind.ALL_REDUCE)
            OpKind.REDUCE_SCATTER -> reduceScatter(s, w)
            OpKind.BROADCAST, OpKind.ALL_GATHER, OpKind.GATHER, OpKind.SCATTER, OpKind.ALL_TO_ALL -> copy(s, w, k)
            OpKind.ALL_GATHER_V, OpKind.ALL_TO_ALL_V -> copyUneven(s, w, k)
            OpKind.REDUCE_SCATTER_V -> reduceScatterUneven(s, w)
            OpKind.BARRIER -> Unit
            OpKind.SPLIT -> split(s, w, group)
            OpKind.GROUP -> makeGroup(s, w, group)
        }
    }

    private fun helpers(): Int = ParallelWork.parallelism - 1

    private fun reduceInPlace(s: OpSlot, w: Int, all: Boolean) {
        val t0 = s.inputs[0]!!
        val dtype = t0.dtype
        val op = s.ops[0]!!
        val factors = s.preMulFactors(w, dtype)
        val n = t0.numel
        val ins = s.inSegs
        for (r in 0 until w) ins[r] = s.inputs[r]!!.segment
        val outs: Array<MemorySegment?>
        val nOuts: Int
        if (all) {
            outs = ins; nOuts = w
        } else {
            outs = s.outSegs; outs[0] = ins[s.roots[0]]; nOuts = 1
        }
        // A reproducible Sum or Avg (ExactReduction): each element the correctly rounded sum of the ranks' values.
        val exact = s.extras[0] === ExactReduction
        val average = op == ReduceOp.Avg
        if (n * dtype.byteSize * w < PARALLEL_BYTES || helpers() == 0) {
            if (exact) ExactSum.reduceSegments(dtype, average, w, ins, 0, outs, nOuts, 0, n)
            else ReduceKernels.reduce(dtype, op, w, ins, 0, outs, nOuts, 0, n, factors)
            return
        }
        val units = ((n + REDUCE_CHUNK - 1) / REDUCE_CHUNK).toInt()
        object : ParallelWork(units) {
            override fun runUnit(unit: Int) {
                val from = unit * REDUCE_CHUNK
                val count = minOf(REDUCE_CHUNK, n - from)
                if (exact) ExactSum.reduceSegments(dtype, average, w, ins, from, outs, nOuts, from, count)
                else ReduceKernels.reduce(dtype, op, w, ins, from, outs, nOuts, from, count, factors)
            }
        }.execute(helpers())
    }

    private fun reduceScatter(s: OpSlot, w: Int) {
        val t0 = s.inputs[0]!!
        val dtype = t0.dtype
        val op = s.ops[0]!!
        val factors = s.preMulFactors(w, dtype)
        val d = s.dims[0]
        val shape = t0.shape
        var outer = 1L
        for (i in 0 until d) outer *= shape[i]
        val blk = t0.stride(d) * (shape[d] / w) // elements of one rank's chunk in one outer row
        val ins = s.inSegs
        for (r in 0 until w) {
            ins[r] = s.inputs[r]!!.segment
            s.singleOuts[r][0] = s.outputs[r]!!.segment
        }
        val blocks = outer * w
        fun block(b: Long, from: Long, count: Long) {
            val r = (b % w).toInt()
            val o = b / w
            ReduceKernels.reduce(dtype, op, w, ins, b * blk + from, s.singleOuts[r], 1, o * blk + from, count, factors)
        }
        if (t0.numel * dtype.byteSize * w < PARALLEL_BYTES || helpers() == 0 || blk == 0L) {
            for (b in 0 until blocks) block(b, 0, blk)
            return
        }
        if (blk >= REDUCE_CHUNK) {
            val per = (blk + REDUCE_CHUNK - 1) / REDUCE_CHUNK
            object : ParallelWork((blocks * per).toInt()) {
                override fun runUnit(unit: Int) {
                    val b = unit / per
                    val from = (unit % per) * REDUCE_CHUNK
                    block(b, from, minOf(REDUCE_CHUNK, blk - from))
                }
            }.execute(helpers())
        } else {
            val group = REDUCE_CHUNK / blk
            object : ParallelWork(((blocks + group - 1) / group).toInt()) {
                override fun runUnit(unit: Int) {
                    val first = unit * group
                    for (b in first until minOf(blocks, first + group)) block(b, 0, blk)
                }
            }.execute(helpers())
        }
    }

    private fun copy(s: OpSlot, w: Int, k: Int) {
        val root = s.roots[0]
        val d = s.dims[0]
        val ref = when (k) {
            OpKind.SCATTER -> s.outputs[0]!!
            else -> s.inputs[0]!!
        }
        val esize = ref.dtype.byteSize.toLong()
        val rows: Long
        val rowBytes: Long
        if (k == OpKind.BROADCAST) {
            rows = 1; rowBytes = ref.byteSize
        } else {
            var outer = 1L
            for (i in 0 until d) outer *= ref.shape[i]
            rows = outer
            val inner = ref.stride(d) * esize
            rowBytes = if (k == OpKind.ALL_TO_ALL) (ref.shape[d] / w) * inner else ref.shape[d] * inner
        }
        val pairs = if (k == OpKind.ALL_GATHER || k == OpKind.ALL_TO_ALL) w * w else w
        val perPair = rows * rowBytes
        if (perPair == 0L) return
        fun copyPair(p: Int, from: Long, to: Long) {
            val src: MemorySegment; val dst: MemorySegment
            val srcBase: Long; val srcStride: Long; val dstBase: Long; val dstStride: Long
            when (k) {
                OpKind.BROADCAST -> {
                    if (p == root) return
                    src = s.inputs[root]!!.segment; dst = s.inputs[p]!!.segment
                    srcBase = 0; dstBase = 0; srcStride = rowBytes; dstStride = rowBytes
                }
                OpKind.ALL_GATHER, OpKind.GATHER -> {
                    val to0 = if (k == OpKind.GATHER) root else p / w
                    val from0 = if (k == OpKind.GATHER) p else p % w
                    src = s.inputs[from0]!!.segment; dst = s.outputs[to0]!!.segment
                    srcBase = 0; srcStride = rowBytes; dstBase = from0 * rowBytes; dstStride = w * rowBytes
                }
                OpKind.SCATTER -> {
                    src = s.inputs[root]!!.segment; dst = s.outputs[p]!!.segment
                    srcBase = p * rowBytes; srcStride = w * rowBytes; dstBase = 0; dstStride = rowBytes
                }
                else -> { // ALL_TO_ALL: output[to0] chunk from0 = input[from0] chunk to0
                    val to0 = p / w
                    val from0 = p % w
                    src = s.inputs[from0]!!.segment; dst = s.outputs[to0]!!.segment
                    srcBase = to0 * rowBytes; srcStride = w * rowBytes; dstBase = from0 * rowBytes; dstStride = w * rowBytes
                }
            }
            var pos = from
            while (pos < to) {
                val row = pos / rowBytes
                val col = pos - row * rowBytes
                val len = minOf(rowBytes - col, to - pos)
                MemorySegment.copy(src, srcBase + row * srcStride + col, dst, dstBase + row * dstStride + col, len)
                pos += len
            }
        }
        if (perPair * pairs < PARALLEL_BYTES || helpers() == 0) {
            for (p in 0 until pairs) copyPair(p, 0, perPair)
            return
        }
        val chunks = (perPair + COPY_CHUNK - 1) / COPY_CHUNK
        object : ParallelWork((pairs * chunks).toInt()) {
            override fun runUnit(unit: Int) {
                val p = (unit / chunks).toInt()
                val from = (unit % chunks) * COPY_CHUNK
                copyPair(p, from, minOf(perPair, from + COPY_CHUNK))
            }
        }.execute(helpers())
    }

    /**
     * allGatherV and allToAllV: one contiguous block per (destination, source) pair, straight from the
     * source's input to the destination's output. Pair `p = dst * w + src`: allGatherV copies src's
     * whole input to rows `prefix[src]` of dst's output; allToAllV copies src's rows for dst
     * (`src.prefix[dst]`, `src.sizes[dst]` rows) to rows `dst.outPrefix[src]` of dst's output.
     */
    private fun copyUneven(s: OpSlot, w: Int, k: Int) {
        val gather = k == OpKind.ALL_GATHER_V
        val rowBytes = (s.extras[0] as UnevenSizes).rowBytes
        fun srcOff(p: Int): Long {
            val dst = p / w; val src = p % w
            return if (gather) 0L else (s.extras[src] as UnevenSizes).prefix[dst] * rowBytes
        }
        fun dstOff(p: Int): Long {
            val dst = p / w; val src = p % w
            val d = s.extras[dst] as UnevenSizes
            return (if (gather) d.prefix[src] else d.outPrefix!![src]) * rowBytes
        }
        fun len(p: Int): Long {
            val dst = p / w; val src = p % w
            return (s.extras[src] as UnevenSizes).let { if (gather) it.sizes[src] else it.sizes[dst] } * rowBytes
        }
        fun copyPair(p: Int, from: Long, to: Long) {
            if (to <= from) return
            val src = s.inputs[p % w]!!.segment
            val dst = s.outputs[p / w]!!.segment
            MemorySegment.copy(src, srcOff(p) + from, dst, dstOff(p) + from, to - from)
        }
        val pairs = w * w
        var total = 0L
        var largest = 0L
        for (p in 0 until pairs) { val l = len(p); total += l; if (l > largest) largest = l }
        if (total < PARALLEL_BYTES || helpers() == 0) {
            for (p in 0 until pairs) copyPair(p, 0, len(p))
            return
        }
        val chunks = (largest + COPY_CHUNK - 1) / COPY_CHUNK
        object : ParallelWork((pairs * chunks).toInt()) {
            override fun runUnit(unit: Int) {
                val p = (unit / chunks).toInt()
                val from = (unit % chunks) * COPY_CHUNK
                copyPair(p, from, minOf(len(p), from + COPY_CHUNK))
            }
        }.execute(helpers())
    }

    /** reduceScatterV: rank r's output is the reduction of rows `prefix[r]` until `prefix[r + 1]` of every input. */
    private fun reduceScatterUneven(s: OpSlot, w: Int) {
        val t0 = s.inputs[0]!!
        val dtype = t0.dtype
        val op = s.ops[0]!!
        val factors = s.preMulFactors(w, dtype)
        val sizes = s.extras[0] as UnevenSizes
        val rowElements = t0.stride(0)
        val ins = s.inSegs
        for (r in 0 until w) {
            ins[r] = s.inputs[r]!!.segment
            s.singleOuts[r][0] = s.outputs[r]!!.segment
        }
        if (t0.numel * dtype.byteSize * w < PARALLEL_BYTES || helpers() == 0) {
            for (r in 0 until w) ReduceKernels.reduce(dtype, op, w, ins, sizes.prefix[r] * rowElements, s.singleOuts[r], 1, 0, sizes.sizes[r] * rowElements, factors)
            return
        }
        // Pieces of REDUCE_CHUNK elements of each rank's block, so a skewed split still spreads.
        var largest = 0L
        for (r in 0 until w) largest = maxOf(largest, sizes.sizes[r] * rowElements)
        val per = (largest + REDUCE_CHUNK - 1) / REDUCE_CHUNK
        object : ParallelWork((w * per).toInt()) {
            override fun runUnit(unit: Int) {
                val r = (unit / per).toInt()
                val from = (unit % per) * REDUCE_CHUNK
                val n = sizes.sizes[r] * rowElements
                if (from >= n) return
                ReduceKernels.reduce(dtype, op, w, ins, sizes.prefix[r] * rowElements + from, s.singleOuts[r], 1, from, minOf(REDUCE_CHUNK, n - from), factors)
            }
        }.execute(helpers())
    }

    private fun split(s: OpSlot, w: Int, parent: LocalGroup) {
        // extras[r] = intArrayOf(hasColor, color, key)
        val byColor = LinkedHashMap<Int, MutableList<Int>>()
        for (r in 0 until w) {
            val e = s.extras[r] as IntArray
            if (e[0] == 0) { s.results[r] = null; continue }
            byColor.getOrPut(e[1]) { ArrayList() }.add(r)
        }
        for ((color, members) in byColor) {
            members.sortWith(compareBy({ (s.extras[it] as IntArray)[2] }, { it }))
            val g = LocalGroup(parent.world, members.size, "${parent.description}/split(color=$color)")
            members.forEachIndexed { i, r -> s.results[r] = g.communicators[i] }
        }
    }

    private fun makeGroup(s: OpSlot, w: Int, parent: LocalGroup) {
        @Suppress("UNCHECKED_CAST")
        val ranks = s.extras[0] as List<Int>
        for (r in 0 until w) s.results[r] = null
        val g = LocalGroup(parent.world, ranks.size, "${parent.description}/group$ranks")
        ranks.forEachIndexed { i, r -> s.results[r] = g.communicators[i] }
    }
}
