package dev.tpcomm.rccl

import dev.tpcomm.gpu.DeviceRuntime
import dev.tpcomm.gpu.NcclCommConfig
import dev.tpcomm.gpu.NcclDataType
import dev.tpcomm.gpu.NcclRedOp
import dev.tpcomm.gpu.NcclResult
import java.lang.foreign.MemoryLayout
import java.lang.foreign.MemorySegment
import java.lang.foreign.SegmentAllocator
import java.lang.foreign.StructLayout
import java.lang.foreign.ValueLayout

/**
 * ABI facts of RCCL and HIP the bindings use, each from the public headers:
 *
 * - ROCm/rccl `src/nccl.h.in` (commit 8de1783): `ncclUniqueId` is `char internal[128]`, passed by
 *   value to `ncclCommInitRankConfig`; `ncclConfig_t` is `ncclConfig_v21700` laid out as
 *   `size_t size; unsigned magic; unsigned version; int blocking, cgaClusterSize, minCTAs, maxCTAs;
 *   const char* netName; int splitShare, trafficClass` (48 bytes on LP64); `NCCL_CONFIG_UNDEF_INT` is
 *   `INT_MIN`, the magic `0xcafebeef`; `ncclResult_t`, `ncclDataType_t`, `ncclRedOp_t` as in
 *   [dev.tpcomm.gpu.NcclResult] / [dev.tpcomm.gpu.NcclDataType] / [dev.tpcomm.gpu.NcclRedOp].
 * - ROCm/HIP `include/hip/hip_runtime_api.h` (commit 746dcac): `hipStreamNonBlocking` = 0x01,
 *   `hipEventDisableTiming` = 0x02, `hipErrorNotReady` = 600, `hipMemcpyKind` host-to-host 0 ..
 *   device-to-device 3 (the same values as CUDA's, see [dev.tpcomm.gpu.DeviceRuntime]).
 */
internal object RcclAbi {
    /** `ncclConfig_v21700`: the revision of `ncclConfig_t` these bindings fill. */
    @JvmField
    val CONFIG_LAYOUT: StructLayout = MemoryLayout.structLayout(
        ValueLayout.JAVA_LONG.withName("size"),
        ValueLayout.JAVA_INT.withName("magic"),
        ValueLayout.JAVA_INT.withName("version"),
        ValueLayout.JAVA_INT.withName("blocking"),
        ValueLayout.JAVA_INT.withName("cgaClusterSize"),
        ValueLayout.JAVA_INT.withName("minCTAs"),
        ValueLayout.JAVA_INT.withName("maxCTAs"),
        ValueLayout.ADDRESS.withName("netName"),
        ValueLayout.JAVA_INT.withName("splitShare"),
        ValueLayout.JAVA_INT.withName("trafficClass"),
    ).withName("ncclConfig_v21700")

    /**
     * The `version` written into the config: the struct revision (2.17.0) rather than the library's
     * version, so a newer library reads exactly the fields this layout has and nothing past its end.
     */
    const val CONFIG_VERSION: Int = 21700

    /** `ncclUniqueId`: 128 bytes, passed by value. */
    @JvmField
    val UNIQUE_ID_LAYOUT: StructLayout = MemoryLayout.structLayout(
        MemoryLayout.sequenceLayout(128, ValueLayout.JAVA_BYTE).withName("internal"),
    ).withName("ncclUniqueId")

    /** `hipStreamNonBlocking` (= `cudaStreamNonBlocking`, see [FfmDeviceRuntime]). */
    const val STREAM_NON_BLOCKING: Int = 0x01

    /** `hipEventDisableTiming` (= `cudaEventDisableTiming`). */
    const val EVENT_DISABLE_TIMING: Int = 0x02

    /** A filled `ncclConfig_t` (as `NCCL_CONFIG_INITIALIZER`, then [config]'s fields) allocated from [allocator]. */
    @JvmStatic
    fun config(config: NcclCommConfig, allocator: SegmentAllocator): MemorySegment {
        val s = allocator.allocate(CONFIG_LAYOUT)
        fun int(name: String, v: Int) = s.set(ValueLayout.JAVA_INT, CONFIG_LAYOUT.byteOffset(MemoryLayout.PathElement.groupElement(name)), v)
        s.set(ValueLayout.JAVA_LONG, 0, CONFIG_LAYOUT.byteSize())
        int("magic", NcclCommConfig.API_MAGIC)
        int("version", CONFIG_VERSION)
        int("blocking", if (config.blocking) 1 else 0)
        int("cgaClusterSize", config.cgaClusterSize ?: NcclCommConfig.UNDEF_INT)
        int("minCTAs", config.minCtas ?: NcclCommConfig.UNDEF_INT)
        int("maxCTAs", config.maxCtas ?: NcclCommConfig.UNDEF_INT)
        val net = config.netName?.let { allocator.allocateFrom(it) } ?: MemorySegment.NULL
        s.set(ValueLayout.ADDRESS, CONFIG_LAYOUT.byteOffset(MemoryLayout.PathElement.groupElement("netName")), net)
        int("splitShare", config.splitShare?.let { if (it) 1 else 0 } ?: NcclCommConfig.UNDEF_INT)
        int("trafficClass", NcclCommConfig.UNDEF_INT)
        return s
    }
}
