package dev.tpcomm.gpu

import dev.tpcomm.InternalTpcommApi

/**
 * Result codes of the NCCL C API (`ncclResult_t`), shared by RCCL.
 *
 * Values from NVIDIA/nccl `src/nccl.h.in` (master, commit 021e804, NCCL 2.30 line; also the
 * `org.bytedeco.cuda.global.nccl` constants of preset 13.3-9.25-1.5.14, NCCL 2.30.7) and ROCm/rccl
 * `src/nccl.h.in` (commit 8de1783): RCCL defines 0..7 and has no `ncclTimeout`.
 */
@InternalTpcommApi
public object NcclResult {
    /** `ncclSuccess` = 0. */
    public const val SUCCESS: Int = 0
    /** `ncclUnhandledCudaError` = 1 (a CUDA/HIP call inside the library failed). */
    public const val UNHANDLED_CUDA_ERROR: Int = 1
    /** `ncclSystemError` = 2. */
    public const val SYSTEM_ERROR: Int = 2
    /** `ncclInternalError` = 3. */
    public const val INTERNAL_ERROR: Int = 3
    /** `ncclInvalidArgument` = 4. */
    public const val INVALID_ARGUMENT: Int = 4
    /** `ncclInvalidUsage` = 5. */
    public const val INVALID_USAGE: Int = 5
    /** `ncclRemoteError` = 6 (a peer exited or the network failed; NCCL 2.12+). */
    public const val REMOTE_ERROR: Int = 6
    /** `ncclInProgress` = 7 (non-blocking communicators; NCCL 2.14+). */
    public const val IN_PROGRESS: Int = 7
    /** `ncclTimeout` = 8 (NVIDIA NCCL only). */
    public const val TIMEOUT: Int = 8

    /** The enumerator's name for [code], e.g. `ncclRemoteError`. */
    @JvmStatic
    public fun name(code: Int): String = when (code) {
        SUCCESS -> "ncclSuccess"
        UNHANDLED_CUDA_ERROR -> "ncclUnhandledCudaError"
        SYSTEM_ERROR -> "ncclSystemError"
        INTERNAL_ERROR -> "ncclInternalError"
        INVALID_ARGUMENT -> "ncclInvalidArgument"
        INVALID_USAGE -> "ncclInvalidUsage"
        REMOTE_ERROR -> "ncclRemoteError"
        IN_PROGRESS -> "ncclInProgress"
        TIMEOUT -> "ncclTimeout"
        else -> "ncclResult($code)"
    }

    /** What the user should look at for [code]. */
    @JvmStatic
    public fun hint(code: Int): String = when (code) {
        UNHANDLED_CUDA_ERROR -> "a CUDA/HIP call inside the library failed (driver, out of memory, or a bad device pointer)"
        SYSTEM_ERROR -> "a system call failed (network interfaces, shared memory /dev/shm, ulimits); run with NCCL_DEBUG=INFO"
        INTERNAL_ERROR -> "the library hit an internal check (possibly memory corruption); run with NCCL_DEBUG=INFO"
        INVALID_ARGUMENT -> "an argument was rejected (pointer not device memory, count, dtype or op not supported)"
        INVALID_USAGE -> "calls were made in an order the library does not allow (mismatched collectives or group calls)"
        REMOTE_ERROR -> "a peer rank failed or exited, or the network between ranks broke"
        TIMEOUT -> "the library's own timeout passed"
        else -> "see the library's log (NCCL_DEBUG=WARN)"
    }
}

