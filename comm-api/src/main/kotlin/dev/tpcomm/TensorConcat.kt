package dev.tpcomm

import java.lang.foreign.MemorySegment

/**
 * Joining tensors along a dimension, behind [Tensor.concat] and [Tensor.concatInto]: the checks and
 * the row-by-row copy. Stateless; the caller owns the tensors for the call.
 */
internal object TensorConcat {
    /**
     * Checks that [tensors] can be joined along dimension [d] (host tensors of one dtype, every
     * other size equal) and returns the joined size along [d].
     */
    fun checkConcat(tensors: List<Tensor>, d: Int): Int {
        val first = tensors[0]
        var total = 0
        for ((i, t) in tensors.withIndex()) {
            require(t.isHostMemory) { "concat needs host tensors; tensor $i is on ${t.device}" }
            require(t.dtype == first.dtype) { "concat: tensor $i is ${t.dtype} but tensor 0 is ${first.dtype}; convert them to one dtype" }
            require(t.dims.size == first.dims.size && t.dims.indices.all { it == d || t.dims[it] == first.dims[it] }) {
                "concat along dim $d: tensor $i has shape ${t.shape}, tensor 0 has ${first.shape}; every size but dim $d must match"
            }
            total = try {
                Math.addExact(total, t.dims[d])
            } catch (_: ArithmeticException) {
                throw IllegalArgumentException(
                    "concat: the joined tensors' dimension $d would hold more than ${Int.MAX_VALUE} elements (a size is an Int); join fewer tensors or split them",
                )
            }
        }
        return total
    }

    /** Copies [tensors] (checked by [checkConcat], joined size [total] along [d]) into [out], row by row. */
    fun copyJoined(tensors: List<Tensor>, out: Tensor, d: Int, total: Int) {
        val first = tensors[0]
        val outer = first.outerCount(d)
        val inner = first.stride(d) * first.dtype.byteSize
        val dst = out.segment
        val outRow = total * inner
        var colOffset = 0L
        for (t in tensors) {
            val rowBytes = t.dims[d] * inner
            val src = t.segment
            if (outer == 1L) {
                MemorySegment.copy(src, 0, dst, colOffset, rowBytes)
            } else {
                for (o in 0 until outer) MemorySegment.copy(src, o * rowBytes, dst, o * outRow + colOffset, rowBytes)
            }
            colOffset += rowBytes
        }
    }
}
