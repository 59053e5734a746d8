@file:JvmName("DjlDTypes")

package dev.tpcomm.djl

import ai.djl.ndarray.types.DataType
import dev.tpcomm.DType

/**
 * The tpcomm [DType] with the same element layout as this DJL [DataType]: `FLOAT32`, `FLOAT64`,
 * `FLOAT16`, `BFLOAT16`, `INT8`, `UINT8`, `INT16`, `INT32`, `INT64`, `UINT32`, `UINT64` and
 * `BOOLEAN` (one byte, 0 or 1: [DType.Bool]) map one to one (same width, same bits).
 * From Java: `DjlDTypes.toDType(dataType)`. Pure and thread-safe.
 *
 * @throws IllegalArgumentException for the DJL types tpcomm has no dtype for; the message names
 * the type and the conversion to make first (`UINT16` -> `INT32`, `COMPLEX64` as two `FLOAT32`
 * arrays, `STRING` through the object collectives).
 */
public fun DataType.toDType(): DType = when (this) {
    DataType.FLOAT32 -> DType.Float32
    DataType.FLOAT64 -> DType.Float64
    DataType.FLOAT16 -> DType.Float16
    DataType.BFLOAT16 -> DType.BFloat16
    DataType.INT8 -> DType.Int8
    DataType.UINT8 -> DType.UInt8
    DataType.INT32 -> DType.Int32
    DataType.INT64 -> DType.Int64
    DataType.INT16 -> DType.Int16
    DataType.UINT32 -> DType.UInt32
    DataType.UINT64 -> DType.UInt64
    DataType.BOOLEAN -> DType.Bool
    else -> throw IllegalArgumentException(
        "DJL DataType.$this has no tpcomm DType (tpcomm carries ${DataType.entries.filter { it.isMapped() }.joinToString()}); " +
            unmappedAdvice(this),
    )
}

/**
 * The DJL [DataType] with the same element layout as this tpcomm [DType]. From Java:
 * `DjlDTypes.toDataType(dtype)`. Pure and thread-safe.
 *
 * @throws IllegalArgumentException for [DType.Float8E4M3] and [DType.Float8E5M2]: DJL (0.36) has no
 * 8-bit float type; the message says to convert to `FLOAT16` (exact) or to view the bytes as `UINT8`.
 */
public fun DType.toDataType(): DataType = when (this) {
    DType.Float32 -> DataType.FLOAT32
    DType.Float64 -> DataType.FLOAT64
    DType.Float16 -> DataType.FLOAT16
    DType.BFloat16 -> DataType.BFLOAT16
    DType.Int8 -> DataType.INT8
    DType.UInt8 -> DataType.UINT8
    DType.Int32 -> DataType.INT32
    DType.Int64 -> DataType.INT64
    DType.Int16 -> DataType.INT16
    DType.UInt32 -> DataType.UINT32
    DType.UInt64 -> DataType.UINT64
    DType.Bool -> DataType.BOOLEAN
    DType.Float8E4M3, DType.Float8E5M2 -> throw IllegalArgumentException(
        "$this has no DJL DataType (DJL has no 8-bit float); convert the tensor to Float16 first (exact for every $this value), " +
            "or move its bytes as a UINT8 array",
    )
}

private fun DataType.isMapped(): Boolean =
    this == DataType.FLOAT32 || this == DataType.FLOAT64 || this == DataType.FLOAT16 || this == DataType.BFLOAT16 ||
        this == DataType.INT8 || this == DataType.UINT8 || this == DataType.INT32 || this == DataType.INT64 ||
        this == DataType.INT16 || this == DataType.UINT32 || this == DataType.UINT64 || this == DataType.BOOLEAN

private fun unmappedAdvice(type: DataType): String = when (type) {
    DataType.UINT16 -> "convert it first with array.toType(DataType.INT32, false), which is exact"
    DataType.COMPLEX64 -> "tpcomm has no complex type: move the real and imaginary parts as two FLOAT32 arrays"
    DataType.STRING -> "strings have no fixed-size elements: move them with allGatherObject/broadcastObject instead"
    else -> "the array's element type is unknown to DJL; give it one of the types above"
}
