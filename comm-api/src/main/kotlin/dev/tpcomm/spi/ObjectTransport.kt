package dev.tpcomm.spi

import dev.tpcomm.Communicator
import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.MessageInfo

/**
 * How the object collectives ([Communicator.allGatherObject] and the others) move their bytes on
 * one backend: the byte-level collectives and messages they are built from. The default moves
 * host tensors through the communicator's own operations; a backend that refuses host tensors
 * (the GPU engine) stages the bytes through device memory instead. The protocol (lengths first,
 * their checks, the padding, the decoding and its failures) is [ObjectProtocol]'s, the same on
 * every backend.
 *
 * Every method is one operation of the communicator (same deadline, failure and cancellation
 * rules); [operation] names it in the flight record and in exceptions.
 */
@InternalTpcommApi
public interface ObjectTransport {
    /** Every rank's [length], in rank order. */
    public suspend fun allGatherLength(operation: String, length: Long): LongArray

    /** [root]'s [lengths] on every rank; every rank passes an array of the root's size. */
    public suspend fun broadcastLengths(operation: String, lengths: LongArray, root: Int): LongArray

    /** Sends [length] to [dst] with [tag] (the header of an object message). */
    public suspend fun sendLength(operation: String, length: Long, dst: Int, tag: Int)

    /** Receives a length sent by [sendLength] from [src] (or [Communicator.ANY_SOURCE]) with [tag] (or [Communicator.ANY_TAG]). */
    public suspend fun recvLength(operation: String, src: Int, tag: Int): Pair<Long, MessageInfo>

    /** Every rank's [bytes] (all ranks pass the same size), one row per rank in rank order. */
    public suspend fun allGather(operation: String, bytes: ByteArray): List<ByteArray>

    /** [root]'s [bytes] on every rank; every rank passes an array of the root's size. */
    public suspend fun broadcast(operation: String, bytes: ByteArray, root: Int): ByteArray

    /** On [root], every rank's [bytes] (all of one size), one row per rank in rank order; null elsewhere. */
    public suspend fun gather(operation: String, bytes: ByteArray, root: Int): List<ByteArray>?

    /** Row `rank` of [root]'s [rows] (`worldSize` rows of [size] bytes; null elsewhere). */
    public suspend fun scatter(operation: String, rows: List<ByteArray>?, size: Int, root: Int): ByteArray

    /** Sends [bytes] to [dst] with [tag]. */
    public suspend fun send(operation: String, bytes: ByteArray, dst: Int, tag: Int)

    /** Receives a message of exactly [size] bytes from [src] (or [Communicator.ANY_SOURCE]) with [tag] (or [Communicator.ANY_TAG]). */
    public suspend fun recv(operation: String, size: Int, src: Int, tag: Int): Pair<ByteArray, MessageInfo>

    /** Factories. */
    public companion object {
        /**
         * The transport of a backend whose collectives take host tensors: `Int64` lengths and `UInt8`
         * bytes in host memory through [comm]'s own operations (the local and MPI backends, and the
         * interface defaults of [dev.tpcomm.Communicator]).
         */
        @JvmStatic
        public fun host(comm: dev.tpcomm.Communicator): ObjectTransport = dev.tpcomm.HostObjectTransport(comm)
    }
}
