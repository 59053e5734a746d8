@file:JvmName("AsyncCollectives")

package dev.tpcomm.coroutines

import dev.tpcomm.Communicator
import dev.tpcomm.MessageInfo
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import kotlinx.coroutines.CoroutineScope
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.Deferred
import kotlinx.coroutines.async

/*
 * Starting a collective without waiting for it.
 *
 * Every function here returns a `Deferred` whose coroutine was started UNDISPATCHED: it runs in the
 * caller's thread until the collective's first suspension, and a Communicator enqueues a collective
 * before it first suspends. So when the function returns, the collective has been issued, and
 * several of them issued back to back from one coroutine are issued in call order on every rank,
 * while the code after them runs concurrently with the communication.
 *
 * The handle is a child of the receiver scope (structured concurrency): the scope does not
 * complete before the collective does, and a failed collective fails the scope unless the scope
 * is a supervisor. `await()` returns the result or throws the collective's
 * CommunicationException / IllegalArgumentException; `isCompleted` polls; `cancel()` cancels the
 * collective, which per the Communicator contract aborts the communicator on every rank if the
 * collective was already in flight (a collective cannot finish without all its ranks).
 */

/**
 * Issues [block] — typically one or more calls on a [Communicator] — at once in the caller's thread
 * and returns a handle to its result, without waiting for it.
 *
 * [block] runs undispatched until its first suspension, so a collective it calls is enqueued
 * before this function returns: handles started one after another from one coroutine issue their
 * collectives in call order. The rest of [block] (after it resumes) runs in the receiver scope's
 * context. The handle is a child of the receiver scope.
 *
 * Cancelling the handle cancels [block]; cancelling a collective in flight aborts its
 * communicator on every rank, as the [Communicator] contract says. [block] runs with [Overlapping]
 * in its context, so no backend holds the caller's thread for its collectives.
 */
public fun <T> CoroutineScope.startCollective(block: suspend CoroutineScope.() -> T): Deferred<T> =
    async(Overlapping, start = CoroutineStart.UNDISPATCHED, block = block)

/**
 * Issues [Communicator.allReduce] of [tensor] with [op] on [comm] now and returns a handle to it
 * (resolving to [tensor], reduced in place) without waiting. Do not read or write [tensor] until
 * the handle completes. See [startCollective] for ordering and cancellation.
 */
public fun CoroutineScope.allReduceAsync(comm: Communicator, tensor: Tensor, op: ReduceOp = ReduceOp.Sum): Deferred<Tensor> =
    startCollective { comm.allReduce(tensor, op) }

/** Issues [Communicator.broadcast] from [root] now; the handle resolves to [tensor]. See [startCollective]. */
public fun CoroutineScope.broadcastAsync(comm: Communicator, tensor: Tensor, root: Int): Deferred<Tensor> =
    startCollective { comm.broadcast(tensor, root) }

/** Issues [Communicator.reduce] to [root] now; the handle resolves to [tensor]. See [startCollective]. */
public fun CoroutineScope.reduceAsync(comm: Communicator, tensor: Tensor, root: Int, op: ReduceOp = ReduceOp.Sum): Deferred<Tensor> =
    startCollective { comm.reduce(tensor, root, op) }

/** Issues [Communicator.allGather] now; the handle resolves to the gathered tensor. See [startCollective]. */
public fun CoroutineScope.allGatherAsync(comm: Communicator, input: Tensor, dim: Int = 0): Deferred<Tensor> =
    startCollective { comm.allGather(input, dim) }

/** Issues [Communicator.allGatherInto] now; the handle resolves to [output]. See [startCollective]. */
public fun CoroutineScope.allGatherIntoAsync(comm: Communicator, output: Tensor, input: Tensor, dim: Int = 0): Deferred<Tensor> =
    startCollective { comm.allGatherInto(output, input, dim) }

/** Issues [Communicator.reduceScatter] now; the handle resolves to this rank's chunk. See [startCollective]. */
public fun CoroutineScope.reduceScatterAsync(
    comm: Communicator,
    input: Tensor,
    op: ReduceOp = ReduceOp.Sum,
    dim: Int = 0,
): Deferred<Tensor> = startCollective { comm.reduceScatter(input, op, dim) }

/** Issues [Communicator.reduceScatterInto] now; the handle resolves to [output]. See [startCollective]. */
public fun CoroutineScope.reduceScatterIntoAsync(
    comm: Communicator,
    output: Tensor,
    input: Tensor,
    op: ReduceOp = ReduceOp.Sum,
    dim: Int = 0,
): Deferred<Tensor> = startCollective { comm.reduceScatterInto(output, input, op, dim) }

/** Issues [Communicator.gather] to [root] now; the handle resolves to the gathered tensor on [root], null elsewhere. */
public fun CoroutineScope.gatherAsync(comm: Communicator, input: Tensor, root: Int, dim: Int = 0): Deferred<Tensor?> =
    startCollective { comm.gather(input, root, dim) }

/** Issues [Communicator.scatter] from [root] now; the handle completes when [output] holds this rank's chunk. */
public fun CoroutineScope.scatterAsync(comm: Communicator, output: Tensor, input: Tensor?, root: Int, dim: Int = 0): Deferred<Unit> =
    startCollective { comm.scatter(output, input, root, dim) }

/** Issues [Communicator.allToAll] now; the handle resolves to the exchanged tensor. See [startCollective]. */
public fun CoroutineScope.allToAllAsync(comm: Communicator, input: Tensor, dim: Int = 0): Deferred<Tensor> =
    startCollective { comm.allToAll(input, dim) }

/** Issues [Communicator.barrier] now; the handle completes once every rank has entered it. */
public fun CoroutineScope.barrierAsync(comm: Communicator): Deferred<Unit> =
    startCollective { comm.barrier() }

/** Issues [Communicator.send] to [dst] now; the handle completes once [tensor] may be reused. */
public fun CoroutineScope.sendAsync(comm: Communicator, tensor: Tensor, dst: Int, tag: Int = 0): Deferred<Unit> =
    startCollective { comm.send(tensor, dst, tag) }

/** Posts [Communicator.recv] from [src] now; the handle resolves to the message's [MessageInfo] once [tensor] holds it. */
public fun CoroutineScope.recvAsync(comm: Communicator, tensor: Tensor, src: Int, tag: Int = 0): Deferred<MessageInfo> =
    startCollective { comm.recv(tensor, src, tag) }
