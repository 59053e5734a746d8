package dev.tpcomm.spi

import dev.tpcomm.CommunicationException
import dev.tpcomm.InternalTpcommApi
import kotlin.time.Duration

/**
 * What a backend supplies to [MonitoredBarrier], the one implementation of
 * [dev.tpcomm.Communicator.monitoredBarrier]: one-`Long` messages on a channel that user messages
 * never match (not by tag, not by `ANY_TAG`, not by `ANY_SOURCE`), and how to abort the
 * communicator. Each message is one operation of the communicator, named
 * [MonitoredBarrier.OPERATION] in the flight record and in exceptions, under the communicator's own
 * deadline, failure and cancellation rules.
 *
 * The local backend uses a reserved negative tag in its mailboxes, MPI the communicator's private
 * duplicate that carries its abort notices, the GPU engine its staged object messages (NCCL
 * matches by order only, and has no wildcards to steal them).
 */
@InternalTpcommApi
public interface MonitoredBarrierChannel {
    /** The communicator's builder of exceptions (with its flight recorder's dump). */
    public val errors: CommunicationErrors

    /**
     * True when receives from several ranks may wait at once, each ending on its own (local, MPI);
     * false when the backend takes them one at a time (the GPU engine: a receive holds the device's
     * thread until it matched), so rank 0 receives in rank order and cannot tell the ranks that
     * arrived once one is missing.
     */
    public val concurrentReceives: Boolean

    /**
     * How long one message of this channel may take before the communicator's own deadline fails
     * it (its `CommConfig.timeout`), or null when nothing bounds it. [MonitoredBarrier] refuses a
     * barrier timeout of half this or more: the ranks that arrive wait up to twice the timeout for
     * rank 0's answer, and the communicator's deadline (on MPI, by default, an `MPI_Abort` of the
     * job) would end that wait before the barrier could name anyone.
     */
    public val callTimeout: Duration? get() = null

    /**
     * Throws what any call on this communicator throws once it was aborted or closed
     * ([dev.tpcomm.CommunicatorAbortedException], naming [MonitoredBarrier.OPERATION]); returns when
     * it is usable. Called before anything is sent, so a barrier on a dead communicator says so
     * instead of naming ranks.
     */
    public fun ensureUsable()

    /** Sends [value] to [dst]. Returns once sent (buffered, or received where the backend waits for that). */
    public suspend fun send(value: Long, dst: Int)

    /** Receives the next value [src] sent with [send]. Cancelling it withdraws or abandons the receive, as the backend's `recv` does. */
    public suspend fun recv(src: Int): Long

    /**
     * Aborts the communicator with [cause] as its failure (the first failure wins), without
     * notifying the peers beyond what the backend's abort always does: the ranks that reached the
     * barrier were told by rank 0 through this channel, and a peer notice racing that answer would
     * replace the named failure with a generic one.
     */
    public fun abort(cause: CommunicationException)
}
