package dev.tpcomm.spi

import dev.tpcomm.Communicator
import dev.tpcomm.InternalTpcommApi

/**
 * What a backend's library cannot do with point-to-point messages although the API allows it, for
 * [CollectiveValidator]: tags, receives from [Communicator.ANY_SOURCE], messages to oneself. Each
 * limit is null where the library can (MPI and the in-process backend have no limits at all), or
 * the reason its refusal gives. A backend that declares a limit gets the refusal from the
 * validator, before the call is recorded or numbered, on every path that moves a message:
 * [Communicator.send], [Communicator.recv], every element of [Communicator.sendRecv],
 * [Communicator.sendObject] and [Communicator.recvObject]; a library that cannot probe at all
 * ([noProbeReason]) gets [Communicator.probe] refused the same way.
 *
 * Immutable and thread-safe.
 */
@InternalTpcommApi
public class PointToPointLimits(
    /** This communicator's rank, which a refused message to oneself names. */
    public val rank: Int,
    /** The backend's name in the refusals ("nccl"). */
    public val backendName: String,
    /**
     * Null where messages carry tags. Otherwise why they do not (NCCL: "NCCL matches messages between
     * two ranks by order only"): only tag 0 is accepted, and [Communicator.ANY_TAG] on a receive;
     * any other tag is refused with `"operation: tag T is not supported by <backend>: <this>; pass tag 0"`
     * (a tensor receive adds `" or ANY_TAG"`).
     */
    public val untaggedReason: String? = null,
    /**
     * Null where a receive may name [Communicator.ANY_SOURCE]. Otherwise why it may not (NCCL: "NCCL
     * needs the sender's rank"): such a receive is refused with
     * `"operation: <backend> cannot receive from ANY_SOURCE (<this>); pass the sender's rank"`.
     */
    public val noAnySourceReason: String? = null,
    /**
     * Null where a rank may send to and receive from itself. Otherwise why a send to oneself cannot
     * work (NCCL: "a lone ncclSend to oneself never completes"): a tensor send to this rank is refused
     * with `"operation: rank R cannot send to itself on <backend> (<this>); copy on the device instead"`,
     * a tensor receive with `"operation: rank R cannot receive from itself on <backend>; copy on the device instead"`
     * (on a host communicator: "copy the tensor instead"),
     * an object message with `"operation: rank R cannot send to itself on <backend>"` (or `receive from`).
     */
    public val noSelfMessageReason: String? = null,
    /**
     * Null where the library can probe for a message without receiving it. Otherwise why it cannot
     * (NCCL: "NCCL has no probe"): [Communicator.probe] is refused with [UnsupportedOperationException]
     * `"probe: <backend> cannot inspect a message before receiving it (<this>); send the size first
     * (e.g. a one-element Int64 tensor), then the payload"`.
     */
    public val noProbeReason: String? = null,
)
