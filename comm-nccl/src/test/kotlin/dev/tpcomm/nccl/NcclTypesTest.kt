@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.nccl

import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.gpu.DeviceRuntime
import dev.tpcomm.gpu.NcclCommConfig
import dev.tpcomm.gpu.NcclConnector
import dev.tpcomm.gpu.NcclDataType
import dev.tpcomm.gpu.NcclRedOp
import dev.tpcomm.gpu.NcclResult
import dev.tpcomm.gpu.NcclVersion
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import org.bytedeco.cuda.global.cudart
import org.bytedeco.cuda.global.nccl

/**
 * tpcomm's NCCL codes against the JavaCPP presets' constants (`org.bytedeco.cuda.global.nccl`, `cudart`,
 * preset 13.3-9.25-1.5.14). They are compile-time constants, so no native library is loaded here.
 */
class NcclTypesTest : FunSpec({
    test("dtype codes equal ncclDataType_t") {
        NcclDataType.of(DType.Int8) shouldBe nccl.ncclInt8
        NcclDataType.of(DType.UInt8) shouldBe nccl.ncclUint8
        NcclDataType.of(DType.Int32) shouldBe nccl.ncclInt32
        NcclDataType.of(DType.Int64) shouldBe nccl.ncclInt64
        NcclDataType.of(DType.Float16) shouldBe nccl.ncclFloat16
        NcclDataType.of(DType.Float32) shouldBe nccl.ncclFloat32
        NcclDataType.of(DType.Float64) shouldBe nccl.ncclFloat64
        NcclDataType.of(DType.BFloat16) shouldBe nccl.ncclBfloat16
        NcclDataType.of(DType.UInt32) shouldBe nccl.ncclUint32
        NcclDataType.of(DType.UInt64) shouldBe nccl.ncclUint64
        NcclDataType.of(DType.Float8E4M3) shouldBe nccl.ncclFloat8e4m3
        NcclDataType.of(DType.Float8E5M2) shouldBe nccl.ncclFloat8e5m2
        NcclDataType.of(DType.Bool) shouldBe nccl.ncclUint8 // as PyTorch's ProcessGroupNCCL
        NcclDataType.of(DType.Int16) shouldBe null // NCCL has no int16
        for (d in DType.entries.filter { it != DType.Bool && it != DType.Int16 }) NcclDataType.toDType(NcclDataType.of(d)!!) shouldBe d
    }

    test("op codes equal ncclRedOp_t; bitwise ops have none") {
        NcclRedOp.of(ReduceOp.Sum) shouldBe nccl.ncclSum
        NcclRedOp.of(ReduceOp.Product) shouldBe nccl.ncclProd
        NcclRedOp.of(ReduceOp.Max) shouldBe nccl.ncclMax
        NcclRedOp.of(ReduceOp.Min) shouldBe nccl.ncclMin
        NcclRedOp.of(ReduceOp.Avg) shouldBe nccl.ncclAvg
        NcclRedOp.of(ReduceOp.BitwiseAnd) shouldBe null
        NcclRedOp.of(ReduceOp.BitwiseOr) shouldBe null
        NcclRedOp.of(ReduceOp.BitwiseXor) shouldBe null
    }

    test("result codes, unique id size, config magic and split color equal the header's") {
        NcclResult.SUCCESS shouldBe nccl.ncclSuccess
        NcclResult.UNHANDLED_CUDA_ERROR shouldBe nccl.ncclUnhandledCudaError
        NcclResult.SYSTEM_ERROR shouldBe nccl.ncclSystemError
        NcclResult.INTERNAL_ERROR shouldBe nccl.ncclInternalError
        NcclResult.INVALID_ARGUMENT shouldBe nccl.ncclInvalidArgument
        NcclResult.INVALID_USAGE shouldBe nccl.ncclInvalidUsage
        NcclResult.REMOTE_ERROR shouldBe nccl.ncclRemoteError
        NcclResult.IN_PROGRESS shouldBe nccl.ncclInProgress
        NcclResult.TIMEOUT shouldBe nccl.ncclTimeout
        NcclConnector.UNIQUE_ID_BYTES shouldBe nccl.NCCL_UNIQUE_ID_BYTES
        NcclCommConfig.API_MAGIC shouldBe nccl.NCCL_API_MAGIC
        NcclVersion.SPLIT_NOCOLOR shouldBe nccl.NCCL_SPLIT_NOCOLOR
        NcclVersion.format(nccl.NCCL_VERSION_CODE) shouldBe "2.30.7"
        NcclVersion.format(2708) shouldBe "2.7.8"
    }

    test("runtime codes equal the CUDA runtime's") {
        DeviceRuntime.SUCCESS shouldBe cudart.cudaSuccess
        DeviceRuntime.ERROR_NOT_READY shouldBe cudart.cudaErrorNotReady
        DeviceRuntime.MEMCPY_HOST_TO_HOST shouldBe cudart.cudaMemcpyHostToHost
        DeviceRuntime.MEMCPY_HOST_TO_DEVICE shouldBe cudart.cudaMemcpyHostToDevice
        DeviceRuntime.MEMCPY_DEVICE_TO_HOST shouldBe cudart.cudaMemcpyDeviceToHost
        DeviceRuntime.MEMCPY_DEVICE_TO_DEVICE shouldBe cudart.cudaMemcpyDeviceToDevice
    }
})
