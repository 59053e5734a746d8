package dev.tpcomm

/**
 * Shape arithmetic of [Tensor]'s factories and views: element counts computed exactly, with the
 * messages every refusal gives. Stateless and thread-safe.
 */
internal object TensorShapes {
    /**
     * The number of elements of [shape], computed exactly (the one place Tensor multiplies sizes):
     * refuses a negative size, a shape whose sizes multiply to more than a `Long` counts (checked
     * over the non-zero sizes, so an empty shape with huge other sizes, whose strides would
     * overflow, is refused too), and, given [dtype], one whose byte size does not fit a `Long`.
     * [operation] starts the message.
     */
    fun elementCount(shape: IntArray, dtype: DType?, operation: String): Long {
        var nonZero = 1L
        var empty = false
        for (d in shape) {
            require(d >= 0) { "$operation: shape ${shape.toList()} has a negative dimension; every size must be >= 0" }
            if (d == 0) {
                empty = true
                continue
            }
            nonZero = try {
                Math.multiplyExact(nonZero, d.toLong())
            } catch (_: ArithmeticException) {
                throw IllegalArgumentException(
                    "$operation: shape ${shape.toList()} has more than ${Long.MAX_VALUE} elements (more than a Long counts); " +
                        "pass sizes whose product is at most that (no memory holds such a tensor: split it into smaller ones)",
                )
            }
        }
        if (dtype != null) {
            val fits = Math.multiplyHigh(nonZero, dtype.byteSize.toLong()) == 0L && nonZero * dtype.byteSize >= 0
            require(fits) {
                "$operation: shape ${shape.toList()} of $dtype needs more bytes than a Long counts (${Long.MAX_VALUE}); " +
                    "split it into smaller tensors"
            }
        }
        return if (empty) 0L else nonZero
    }

    /** [shape], or one dimension of [count] when empty; refuses a shape that does not hold [count] elements (`Tensor.of`). */
    fun resolveShape(count: Int, shape: IntArray): IntArray {
        if (shape.isEmpty()) return intArrayOf(count)
        val n = elementCount(shape, null, "of")
        require(n == count.toLong()) { "of: shape ${shape.toList()} holds $n elements but $count values were given; pass a shape whose sizes multiply to $count" }
        return shape
    }
}
