package dev.tpcomm.gpu

/**
 * What every operation ([NcclOp]) of one communicator issues with: the library and runtime, the
 * device's thread, the `ncclComm_t` and its stream, this rank's place, the library version, and
 * the communicator's parts an operation reports to (its [handle], [failures], stream [resources]).
 *
 * Role: an immutable bundle passed to each operation, so that operations never reach into the
 * communicator. Thread-safety: immutable but for [status], a scratch word of the native thread.
 * Lifetime: created and owned by [NcclCommunicator], one per communicator.
 */
internal class NcclOpContext(
    val api: NcclApi,
    val runtime: DeviceRuntime,
    val thread: DeviceThread,
    val comm: Long,
    val stream: Long,
    val rank: Int,
    val worldSize: Int,
    val backendName: String,
    val libraryVersionCode: Int,
    val handle: NcclCommHandle,
    val failures: NcclFailures,
    val resources: StreamResources,
    /** The communicator's world, the same on every rank of it ([DeviceThread.orderAcross]). */
    val worldKey: Any,
) {
    /** The out-argument of `ncclCommGetAsyncError` (native thread only). */
    val status: IntArray = IntArray(1)
}
