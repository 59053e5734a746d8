package dev.tpcomm.gpu

import dev.tpcomm.Communicator

/**
 * The GPU engine's extras on any [Communicator] a program holds (as `Comm.create` returns it),
 * without naming the engine's class: each is [NcclCommunicator]'s member of the same name, and
 * fails with an [IllegalArgumentException] saying so on a communicator of another backend.
 */
private fun Communicator.engine(extra: String): NcclCommunicator =
    this as? NcclCommunicator ?: throw IllegalArgumentException(
        "$extra is an extra of the GPU engine (backends nccl and rccl), but this communicator is the $backendName backend's; " +
            "create it with Comm.create(\"nccl\") or Comm.create(\"rccl\"), or leave $extra out on other backends",
    )

/**
 * The stream your kernels produce this communicator's inputs on ([NcclCommunicator.producerStream]):
 * every later call is ordered after the work queued on it. Only on the GPU engine: reading or
 * setting it on another backend's communicator throws [IllegalArgumentException]. Thread-safe.
 */
public var Communicator.producerStream: Long
    get() = engine("producerStream").producerStream
    set(value) {
        engine("producerStream").producerStream = value
    }

/**
 * Orders every call issued after this one after [event], a CUDA/HIP event recorded on your stream
 * ([NcclCommunicator.waitEvent]): one stream wait, no host synchronisation. Only on the GPU engine
 * ([IllegalArgumentException] otherwise, nothing recorded). Failure and cancellation as for a collective.
 */
public suspend fun Communicator.waitEvent(event: Long) {
    engine("waitEvent").waitEvent(event)
}
