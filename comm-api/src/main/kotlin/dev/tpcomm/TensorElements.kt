package dev.tpcomm

import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

/**
 * How one element of each [DType] is read from and written to host memory: the conversions behind
 * [Tensor.getDouble], [Tensor.setDouble], [Tensor.getLong] and [Tensor.setLong] and the layouts of
 * the bulk copies (`Tensor.of`, `toFloatArray`, ...). Elements are stored in the platform's native
 * byte order at any byte offset (unaligned layouts). Stateless and thread-safe; the caller checks
 * the index and that the memory is open.
 */
internal object TensorElements {
    @JvmField val F32: ValueLayout.OfFloat = ValueLayout.JAVA_FLOAT_UNALIGNED
    @JvmField val F64: ValueLayout.OfDouble = ValueLayout.JAVA_DOUBLE_UNALIGNED
    @JvmField val I16: ValueLayout.OfShort = ValueLayout.JAVA_SHORT_UNALIGNED
    @JvmField val I32: ValueLayout.OfInt = ValueLayout.JAVA_INT_UNALIGNED
    @JvmField val I64: ValueLayout.OfLong = ValueLayout.JAVA_LONG_UNALIGNED
    private const val TWO_TO_63: Double = 9.223372036854775807E18

    /** The element of [dtype] at byte offset [off] of [s], converted to Double (see [Tensor.getDouble]). */
    fun getDouble(s: MemorySegment, dtype: DType, off: Long): Double = when (dtype) {
        DType.Float32 -> s.get(F32, off).toDouble()
        DType.Float64 -> s.get(F64, off)
        DType.Float16 -> HalfPrecision.float16ToFloat(s.get(I16, off)).toDouble()
        DType.BFloat16 -> HalfPrecision.bfloat16ToFloat(s.get(I16, off)).toDouble()
        DType.Int8 -> s.get(ValueLayout.JAVA_BYTE, off).toDouble()
        DType.UInt8 -> (s.get(ValueLayout.JAVA_BYTE, off).toInt() and 0xFF).toDouble()
        DType.Int32 -> s.get(I32, off).toDouble()
        DType.Int64 -> s.get(I64, off).toDouble()
        DType.UInt32 -> (s.get(I32, off).toLong() and 0xFFFF_FFFFL).toDouble()
        DType.UInt64 -> s.get(I64, off).toULong().toDouble()
        DType.Float8E4M3 -> Float8.e4m3ToFloat(s.get(ValueLayout.JAVA_BYTE, off)).toDouble()
        DType.Float8E5M2 -> Float8.e5m2ToFloat(s.get(ValueLayout.JAVA_BYTE, off)).toDouble()
        DType.Int16 -> s.get(I16, off).toDouble()
        DType.Bool -> if (s.get(ValueLayout.JAVA_BYTE, off).toInt() != 0) 1.0 else 0.0
    }

    /** Stores [value] converted to [dtype] at byte offset [off] of [s] (see [Tensor.setDouble]). */
    fun setDouble(s: MemorySegment, dtype: DType, off: Long, value: Double) {
        when (dtype) {
            DType.Float32 -> s.set(F32, off, value.toFloat())
            DType.Float64 -> s.set(F64, off, value)
            DType.Float16 -> s.set(I16, off, HalfPrecision.floatToFloat16(value.toFloat()))
            DType.BFloat16 -> s.set(I16, off, HalfPrecision.floatToBFloat16(value.toFloat()))
            DType.Int8, DType.UInt8 -> s.set(ValueLayout.JAVA_BYTE, off, value.toLong().toByte())
            DType.Int32, DType.UInt32 -> s.set(I32, off, value.toLong().toInt())
            DType.Int64 -> s.set(I64, off, value.toLong())
            DType.UInt64 -> s.set(I64, off, if (value >= TWO_TO_63) value.toULong().toLong() else value.toLong())
            DType.Float8E4M3 -> s.set(ValueLayout.JAVA_BYTE, off, Float8.toE4M3(value))
            DType.Float8E5M2 -> s.set(ValueLayout.JAVA_BYTE, off, Float8.toE5M2(value))
            DType.Int16 -> s.set(I16, off, value.toLong().toShort())
            DType.Bool -> s.set(ValueLayout.JAVA_BYTE, off, if (value != 0.0) 1 else 0)
        }
    }

    /** The element of [dtype] at byte offset [off] of [s] as a Long (see [Tensor.getLong]). */
    fun getLong(s: MemorySegment, dtype: DType, off: Long): Long = when (dtype) {
        DType.Int8 -> s.get(ValueLayout.JAVA_BYTE, off).toLong()
        DType.UInt8 -> (s.get(ValueLayout.JAVA_BYTE, off).toLong() and 0xFF)
        DType.Int32 -> s.get(I32, off).toLong()
        DType.Int64, DType.UInt64 -> s.get(I64, off)
        DType.UInt32 -> s.get(I32, off).toLong() and 0xFFFF_FFFFL
        DType.Int16 -> s.get(I16, off).toLong()
        DType.Bool -> if (s.get(ValueLayout.JAVA_BYTE, off).toInt() != 0) 1L else 0L
        else -> getDouble(s, dtype, off).toLong()
    }

    /** Stores [value] as an element of [dtype] at byte offset [off] of [s] (see [Tensor.setLong]). */
    fun setLong(s: MemorySegment, dtype: DType, off: Long, value: Long) {
        when (dtype) {
            DType.Int8, DType.UInt8 -> s.set(ValueLayout.JAVA_BYTE, off, value.toByte())
            DType.Int32, DType.UInt32 -> s.set(I32, off, value.toInt())
            DType.Int64, DType.UInt64 -> s.set(I64, off, value)
            DType.Int16 -> s.set(I16, off, value.toShort())
            DType.Bool -> s.set(ValueLayout.JAVA_BYTE, off, if (value != 0L) 1 else 0)
            else -> setDouble(s, dtype, off, value.toDouble())
        }
    }
}
