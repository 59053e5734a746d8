package dev.tpcomm.rccl

import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.gpu.DeviceRuntime

/**
 * [DeviceRuntime] over the HIP runtime (`libamdhip64.so`) through `java.lang.foreign` downcalls.
 * Constructing it opens the library (from `TPCOMM_HIP_LIBRARY`, the loader's path, `$ROCM_PATH/lib`
 * or `/opt/rocm/lib`) and resolves every symbol ([UnsatisfiedLinkError] otherwise). The current
 * device is per thread, as in HIP. Thread-safe.
 *
 * A raw native seam: its methods call the library directly (`ncclCommAbort`, `ncclGroupStart`, frees
 * of device memory) outside the engine's ordering, so it needs the [InternalTpcommApi] opt-in. Users
 * get it through `Comm.create("rccl")`, never by constructing it.
 */
@InternalTpcommApi
public class HipRuntime internal constructor(private val impl: FfmDeviceRuntime) : DeviceRuntime by impl {
    /** Opens the HIP runtime from the usual places (see the class KDoc). */
    public constructor() : this(FfmDeviceRuntime.hip())

    /** Where the library was loaded from. */
    public val loadedFrom: String get() = impl.loadedFrom
}
