package dev.tpcomm.bench

import dev.tpcomm.DType
import dev.tpcomm.Float8
import dev.tpcomm.HalfPrecision
import dev.tpcomm.ReduceOp

/**
 * The known inputs every size is checked with, and the results they must give. Values are small
 * whole numbers, exact in every dtype (bfloat16 holds whole numbers up to 256 exactly), so the
 * expected result is exact too.
 */
internal object CheckPattern {
    /** Rank [r]'s input element [i] for a reduction with [op] over [world] ranks. */
    fun reduceInput(op: ReduceOp, world: Int, r: Int, i: Long): Long = when (op) {
        // Exactly one rank contributes 2 to each element: the product is 2 whatever the world size.
        ReduceOp.Product -> if ((r + i) % world == 0L) 2 else 1
        else -> (r + i) % 4 + 1
    }

    /** The reduction of every rank's [reduceInput] at element [i], as [dtype] computes it. */
    fun reduceExpected(op: ReduceOp, dtype: DType, world: Int, i: Long): Double {
        val xs = LongArray(world) { reduceInput(op, world, it, i) }
        return if (dtype.isFloatingPoint) {
            val v = when (op) {
                ReduceOp.Sum -> xs.sum().toDouble()
                ReduceOp.Avg -> xs.sum().toDouble() / world
                ReduceOp.Product -> xs.fold(1.0) { a, x -> a * x }
                ReduceOp.Min -> xs.min().toDouble()
                ReduceOp.Max -> xs.max().toDouble()
                else -> throw IllegalArgumentException("$op does not apply to $dtype")
            }
            roundTo(dtype, v)
        } else if (dtype == DType.Bool) {
            // Truth values: Sum/Max/BitwiseOr are a logical or, Product/Min/BitwiseAnd an and, BitwiseXor an xor.
            val truths = xs.map { it != 0L }
            val v = when (op) {
                ReduceOp.Sum, ReduceOp.Max, ReduceOp.BitwiseOr -> truths.any { it }
                ReduceOp.Product, ReduceOp.Min, ReduceOp.BitwiseAnd -> truths.all { it }
                ReduceOp.BitwiseXor -> truths.count { it } % 2 == 1
                else -> throw IllegalArgumentException("$op does not apply to $dtype")
            }
            if (v) 1.0 else 0.0
        } else {
            val v = when (op) {
                ReduceOp.Sum -> wrap(dtype, xs.sum())
                ReduceOp.Avg -> wrap(dtype, xs.sum()) / world
                ReduceOp.Product -> xs.fold(1L) { a, x -> wrap(dtype, a * x) }
                ReduceOp.Min -> xs.min()
                ReduceOp.Max -> xs.max()
                ReduceOp.BitwiseAnd -> xs.reduce { a, x -> a and x }
                ReduceOp.BitwiseOr -> xs.reduce { a, x -> a or x }
                ReduceOp.BitwiseXor -> xs.reduce { a, x -> a xor x }
                is ReduceOp.PreMulSum -> throw IllegalArgumentException("$op does not apply to $dtype")
            }
            wrap(dtype, v).toDouble()
        }
    }

    /** Rank [r]'s all-gather input element [i]. */
    fun gatherInput(r: Int, i: Long): Double = ((r * 13 + i) % 61).toDouble()

    /** The broadcast root's element [i]. */
    fun broadcastValue(i: Long): Double = (i % 101 + 7).toDouble()

    /** Rank [q]'s all-to-all input: element [i] of the chunk it sends to rank [dest]. */
    fun allToAllInput(q: Int, dest: Int, i: Long): Double = ((q * 7 + dest * 3 + i) % 53).toDouble()

    /** [v] wrapped to the integer [dtype]'s width. */
    fun wrap(dtype: DType, v: Long): Long = when (dtype) {
        DType.Int8 -> v.toByte().toLong()
        DType.UInt8 -> v and 0xFF
        DType.Int16 -> v.toShort().toLong()
        DType.Int32 -> v.toInt().toLong()
        DType.UInt32 -> v and 0xFFFF_FFFFL
        else -> v
    }

    /** [v] rounded to the floating-point [dtype]. */
    fun roundTo(dtype: DType, v: Double): Double = when (dtype) {
        DType.Float32 -> v.toFloat().toDouble()
        DType.Float16 -> HalfPrecision.float16ToFloat(HalfPrecision.floatToFloat16(v.toFloat())).toDouble()
        DType.BFloat16 -> HalfPrecision.bfloat16ToFloat(HalfPrecision.floatToBFloat16(v.toFloat())).toDouble()
        DType.Float8E4M3, DType.Float8E5M2 -> Float8.toFloat(dtype, Float8.fromDouble(dtype, v)).toDouble()
        else -> v
    }
}
