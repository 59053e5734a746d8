@file:JvmName("DjlDTypes")

package dev.tpcomm.djl

import ai.djl.ndarray.types.DataType
import dev.tpcomm.DType

/**
 * The tpcomm [DType] with the same element layout as this DJL [DataType]: `FLOAT32`, `FLOAT64`,
 * `FLOAT16`, `BFLOAT16`, `INT8`, `UINT8`, `INT32` and `INT64` map one to one (same width, same bits).
 * From Java: `DjlDTypes.toDType(dataType)`. Pure and thread-safe.
 *
 * @throws IllegalArgumentException for the DJL types tpcomm has no dtype for; the message names
 * the type and the conversion to make first (`BOOLEAN` -> `UINT8`, `INT16` and `UINT16` -> `INT32`,
 * `UINT32` -> `INT64`, `UINT64` -> `INT64`, `COMPLEX64` as two `FLOAT32` arrays, `STRING` through
 * the object collectives).
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
    else -> throw IllegalArgumentException(
        "DJL DataType.$this has no tpcomm DType (tpcomm carries ${DataType.entries.filter { it.isMapped() }.joinToString()}); " +
            unmappedAdvice(this),
    )
}

/**
 * The DJL [DataType] with the same element layout as this tpcomm [DType]; every [DType] has one,
 * so this never throws. From Java: `DjlDTypes.toDataType(dtype)`. Pure and thread-safe.
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
}

private fun DataType.isMapped(): Boolean =
    this == DataType.FLOAT32 || this == DataType.FLOAT64 || this == DataType.FLOAT16 || this == DataType.BFLOAT16 ||
        this == DataType.INT8 || this == DataType.UINT8 || this == DataType.INT32 || this == DataType.INT64

private fun unmappedAdvice(type: DataType): String = when (type) {
    DataType.BOOLEAN ->
        "convert it first with array.toType(DataType.UINT8, false) (0 and 1; ReduceOp.Max is then a logical or, Min a logical and)"
    DataType.INT16, DataType.UINT16 -> "convert it first with array.toType(DataType.INT32, false), which is exact"
    DataType.UINT32 -> "convert it first with array.toType(DataType.INT64, false), which is exact"
    DataType.UINT64 ->
        "convert it first with array.toType(DataType.INT64, false) (values above Long.MAX_VALUE wrap to negative; the bitwise ReduceOps are unaffected)"
    DataType.COMPLEX64 -> "tpcomm has no complex type: move the real and imaginary parts as two FLOAT32 arrays"
    DataType.STRING -> "strings have no fixed-size elements: move them with allGatherObject/broadcastObject instead"
    else -> "the array's element type is unknown to DJL; give it one of the types above"
}
