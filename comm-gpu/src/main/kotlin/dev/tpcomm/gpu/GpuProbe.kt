package dev.tpcomm.gpu

/**
 * What a GPU backend found when it tried to load its library and count devices.
 *
 * @property available true when the library loaded, is recent enough, and a device is visible.
 * @property reason why not, with what to install or set; null when available.
 * @property deviceCount visible devices (0 when unknown).
 * @property libraryVersion `ncclGetVersion`'s code (0 when unknown).
 */
public data class GpuProbe(
    public val available: Boolean,
    public val reason: String?,
    public val deviceCount: Int,
    public val libraryVersion: Int,
)
