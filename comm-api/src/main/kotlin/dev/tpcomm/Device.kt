package dev.tpcomm

/**
 * Where a [Tensor]'s memory lives.
 *
 * Host memory is reachable from the JVM through [Tensor.segment]; device memory is known only by
 * its address ([Tensor.address]) and is moved by a GPU backend.
 */
public sealed interface Device {
    /** True for GPU devices ([Cuda] and [Rocm]). */
    public val isGpu: Boolean

    /** Host (CPU) memory, off the JVM heap. */
    public data object Host : Device {
        override val isGpu: Boolean get() = false
    }

    /**
     * An NVIDIA GPU, numbered as CUDA numbers the visible devices.
     *
     * @property index the device's CUDA ordinal, from 0, among the visible devices.
     */
    public data class Cuda(public val index: Int) : Device {
        init {
            require(index >= 0) { "CUDA device index must be >= 0, got $index" }
        }

        override val isGpu: Boolean get() = true
    }

    /**
     * An AMD GPU, numbered as HIP numbers the visible devices.
     *
     * @property index the device's HIP ordinal, from 0, among the visible devices.
     */
    public data class Rocm(public val index: Int) : Device {
        init {
            require(index >= 0) { "ROCm device index must be >= 0, got $index" }
        }

        override val isGpu: Boolean get() = true
    }
}
