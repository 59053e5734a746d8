package dev.tpcomm.testkit

import dev.tpcomm.Tensor

/**
 * Moves test data between the host, where the suite builds inputs and checks results, and the
 * memory a backend's collectives take (device memory for GPU backends).
 *
 * The suite builds every input as a host tensor, hands [toBackend]'s result to the communicator, and
 * reads results back with [toHost]. Both functions must copy faithfully (bit for bit) and must not
 * return a tensor that aliases the argument unless the backend uses host memory ([Host]).
 * Called from many coroutines at once: implementations must be thread-safe.
 */
public interface TensorPlacement {
    /** A tensor the backend accepts holding [host]'s dtype, shape and bits. May return [host] itself for host backends. */
    public fun toBackend(host: Tensor): Tensor

    /** A host tensor holding [tensor]'s dtype, shape and bits. May return [tensor] itself when it is a host tensor. */
    public fun toHost(tensor: Tensor): Tensor

    /** Host memory: both directions return their argument (the communicator works on the suite's own tensors). */
    public object Host : TensorPlacement {
        override fun toBackend(host: Tensor): Tensor = host
        override fun toHost(tensor: Tensor): Tensor = tensor
    }
}
