@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.gpu

import dev.tpcomm.CommunicationException

/**
 * A call into NCCL/RCCL or the GPU runtime failed. [result] is the `ncclResult_t` code
 * ([NcclResult]) when the library reported it, or the runtime's `cudaError_t`/`hipError_t` code
 * when [isRuntimeError]. The communicator is aborted; every pending and later call fails with a
 * [dev.tpcomm.CommunicatorAbortedException] whose cause is this exception.
 */
public class NcclException(
    message: String,
    rank: Int,
    backend: String,
    operation: String,
    sequenceNumber: Long,
    /** The library's or runtime's error code. */
    public val result: Int,
    /** True when [result] is a CUDA/HIP runtime code rather than an `ncclResult_t`. */
    public val isRuntimeError: Boolean = false,
    flightRecorderDump: String? = null,
) : CommunicationException(message, rank, backend, operation, sequenceNumber, null, flightRecorderDump)
