package dev.tpcomm.spi

import dev.tpcomm.InternalTpcommApi

/**
 * The operations a communicator runs, with the name users, exceptions and the flight recorder see
 * ([apiName]) and which signature fields apply to each. The one list every backend uses.
 */
@InternalTpcommApi
public enum class CollectiveOp(
    /** The name of the [dev.tpcomm.Communicator] method, as it appears in messages. */
    public val apiName: String,
    /** The operation moves a tensor (dtype and shape are part of its signature). */
    public val hasTensor: Boolean,
    /** The operation takes a [dev.tpcomm.ReduceOp]. */
    public val hasReduceOp: Boolean = false,
    /** The operation takes a root rank. */
    public val hasRoot: Boolean = false,
    /** The operation takes a dimension. */
    public val hasDim: Boolean = false,
    /** Point-to-point: not matched across every rank, so it has no collective signature. */
    public val isPointToPoint: Boolean = false,
) {
    /** [dev.tpcomm.Communicator.allReduce]. */
    AllReduce("allReduce", hasTensor = true, hasReduceOp = true),
    /** [dev.tpcomm.Communicator.broadcast]. */
    Broadcast("broadcast", hasTensor = true, hasRoot = true),
    /** [dev.tpcomm.Communicator.reduce]. */
    Reduce("reduce", hasTensor = true, hasReduceOp = true, hasRoot = true),
    /** [dev.tpcomm.Communicator.allGather] and `allGatherInto`. */
    AllGather("allGather", hasTensor = true, hasDim = true),
    /** [dev.tpcomm.Communicator.reduceScatter] and `reduceScatterInto`. */
    ReduceScatter("reduceScatter", hasTensor = true, hasReduceOp = true, hasDim = true),
    /** [dev.tpcomm.Communicator.gather]. */
    Gather("gather", hasTensor = true, hasRoot = true, hasDim = true),
    /** [dev.tpcomm.Communicator.scatter]: the signature carries the output (every rank has one). */
    Scatter("scatter", hasTensor = true, hasRoot = true, hasDim = true),
    /** [dev.tpcomm.Communicator.allToAll]. */
    AllToAll("allToAll", hasTensor = true, hasDim = true),
    /** [dev.tpcomm.Communicator.barrier]. */
    Barrier("barrier", hasTensor = false),
    /** [dev.tpcomm.Communicator.split]. */
    Split("split", hasTensor = false),
    /** [dev.tpcomm.Communicator.group]: the signature's extra field carries the ranks' hash. */
    Group("group", hasTensor = false),
    /** [dev.tpcomm.Communicator.send]. */
    Send("send", hasTensor = true, isPointToPoint = true),
    /** [dev.tpcomm.Communicator.recv]. */
    Recv("recv", hasTensor = true, isPointToPoint = true),
    /** [dev.tpcomm.Communicator.probe]. */
    Probe("probe", hasTensor = false, isPointToPoint = true),
    /**
     * [dev.tpcomm.Communicator.allGatherV] and `allGatherVInto`: the signature carries the output's
     * shape (the same on every rank) and, in its extra field, the digest of the per-rank sizes.
     */
    AllGatherV("allGatherV", hasTensor = true),
    /**
     * [dev.tpcomm.Communicator.reduceScatterV] and `reduceScatterVInto`: the signature carries the
     * input's shape and, in its extra field, the digest of the per-rank sizes.
     */
    ReduceScatterV("reduceScatterV", hasTensor = true, hasReduceOp = true),
    /**
     * [dev.tpcomm.Communicator.allToAllV] and `allToAllVInto`: the signature carries the dtype and
     * the shape of one row (dim 0 is per rank), and in its extra field whether the splits this rank
     * expects agree with what its peers send ([CollectiveSignature.splitsWord]).
     */
    AllToAllV("allToAllV", hasTensor = true),
    /**
     * [dev.tpcomm.Communicator.allGatherObject]. This and the other object operations and
     * [MonitoredBarrier] are composite: each is several library calls (lengths, then payloads),
     * issued as one operation; every step carries the composite's signature (no tensor; the step's
     * index in the extra field), so a step never matches a peer's tensor collective.
     */
    AllGatherObject("allGatherObject", hasTensor = false),
    /** [dev.tpcomm.Communicator.broadcastObject] (composite; see [AllGatherObject]). */
    BroadcastObject("broadcastObject", hasTensor = false, hasRoot = true),
    /** [dev.tpcomm.Communicator.gatherObject] (composite; see [AllGatherObject]). */
    GatherObject("gatherObject", hasTensor = false, hasRoot = true),
    /** [dev.tpcomm.Communicator.scatterObject] (composite; see [AllGatherObject]). */
    ScatterObject("scatterObject", hasTensor = false, hasRoot = true),
    /** [dev.tpcomm.Communicator.sendObject] (composite: the length, then the bytes). */
    SendObject("sendObject", hasTensor = false, isPointToPoint = true),
    /** [dev.tpcomm.Communicator.recvObject] (composite: the length, then the bytes). */
    RecvObject("recvObject", hasTensor = false, isPointToPoint = true),
    /** [dev.tpcomm.Communicator.monitoredBarrier] (composite: the tokens to rank 0 and its answers). */
    MonitoredBarrier("monitoredBarrier", hasTensor = false),
    /** A backend's collective that makes a new communicator over the same ranks (MPI's `duplicate`), issued as [Split] is. */
    Duplicate("duplicate", hasTensor = false),
    ;

    /** One of the uneven collectives (sizes per rank along dim 0): their extra signature word is about sizes. */
    public val isUneven: Boolean get() = this == AllGatherV || this == ReduceScatterV || this == AllToAllV

    override fun toString(): String = apiName
}
