package dev.tpcomm.gpu.sim

import dev.tpcomm.DType
import dev.tpcomm.Float8
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor

/**
 * FP8 reductions as NCCL's device kernels compute them (NVIDIA/nccl v2.30.7-1
 * `src/device/reduce_kernel.h`, `SPECIALIZE_REDUCE(FuncSum, __nv_fp8_e4m3, 1, ...)` and the E5M2
 * twins): each step widens both operands to half, adds (`__hadd`), multiplies (`__hmul`) or takes
 * `__hmin`/`__hmax` in half precision, and converts the result back to FP8 with the
 * `__nv_fp8_e4m3(__half)` constructor, which rounds to nearest even and saturates
 * (`__NV_SATFINITE`, CUDA `cuda_fp8.hpp`). So, unlike tpcomm's host reductions, NCCL rounds to FP8
 * after every step. `__hmin`/`__hmax` return the other operand when one is NaN. Avg is
 * `ncclDevPreMulSum` (`src/enqueue.cc`, `hostToDevRedOp`): every input is first multiplied by
 * `__nv_cvt_float_to_fp8(1.0 / nRanks, __NV_SATFINITE, ...)` in half and rounded to FP8, then summed.
 *
 * The ranks are folded in rank order (NCCL's ring order differs, which the conformance suite's
 * tolerance covers). Pure functions; thread-safe.
 */
internal object Float8Reduction {
    /** [inputs] (one per rank, FP8 host tensors of one shape) reduced with [op] into a new tensor. */
    fun reduce(op: ReduceOp, inputs: List<Tensor>): Tensor {
        val dt = inputs[0].dtype
        require(dt == DType.Float8E4M3 || dt == DType.Float8E5M2) { "Float8Reduction takes FP8 tensors, got $dt" }
        val out = Tensor.zeros(dt, inputs[0].shape)
        val scale = if (op == ReduceOp.Avg) widen(dt, Float8.fromDouble(dt, 1.0 / inputs.size)) else 1.0
        for (i in 0 until out.numel) {
            fun operand(r: Int): Byte {
                val x = inputs[r].segment.get(java.lang.foreign.ValueLayout.JAVA_BYTE, i)
                return if (op == ReduceOp.Avg) narrow(dt, half(widen(dt, x) * scale)) else x
            }
            var acc = operand(0)
            for (r in 1 until inputs.size) {
                val a = widen(dt, acc)
                val b = widen(dt, operand(r))
                val h = when (op) {
                    ReduceOp.Sum, ReduceOp.Avg -> half(a + b)
                    ReduceOp.Product -> half(a * b)
                    ReduceOp.Min -> if (a.isNaN()) b else if (b.isNaN()) a else minOf(a, b)
                    ReduceOp.Max -> if (a.isNaN()) b else if (b.isNaN()) a else maxOf(a, b)
                    else -> throw IllegalArgumentException("$op is not defined on $dt")
                }
                acc = narrow(dt, h)
            }
            out.segment.set(java.lang.foreign.ValueLayout.JAVA_BYTE, i, acc)
        }
        return out
    }

    /** FP8 to half is exact (every FP8 value is a half), and half to double too. */
    private fun widen(dt: DType, bits: Byte): Double = Float8.toFloat(dt, bits).toDouble()

    private fun narrow(dt: DType, value: Double): Byte = Float8.fromDouble(dt, value)

    /** [exact] (the exact sum or product of two halves, held in a double) rounded to half precision, to nearest even. */
    private fun half(exact: Double): Double {
        if (exact.isNaN() || exact.isInfinite() || exact == 0.0) return exact
        val a = Math.abs(exact)
        if (a >= 65520.0) return Math.copySign(Double.POSITIVE_INFINITY, exact) // rounds past 65504
        val e = maxOf(Math.getExponent(a), -14)
        val rounded = Math.scalb(Math.rint(Math.scalb(a, 10 - e)), e - 10)
        return Math.copySign(rounded, exact)
    }
}
