package dev.tpcomm.gpu

/**
 * A call into NCCL/RCCL or the GPU runtime failed: the core's [dev.tpcomm.NativeLibraryException],
 * whose `result` is the `ncclResult_t` code ([NcclResult]) or, when `isRuntimeError`, the runtime's
 * `cudaError_t`/`hipError_t` code. The communicator is aborted; every pending and later call fails
 * with a [dev.tpcomm.CommunicatorAbortedException] whose cause is this exception.
 */
public typealias NcclException = dev.tpcomm.NativeLibraryException
