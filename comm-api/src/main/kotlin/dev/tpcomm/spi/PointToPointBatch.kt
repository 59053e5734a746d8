package dev.tpcomm.spi

import dev.tpcomm.Communicator
import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.MessageInfo
import dev.tpcomm.PointToPoint
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.coroutineScope

/**
 * [Communicator.sendRecv] for backends whose [Communicator.send] and [Communicator.recv] are
 * non-blocking underneath (the in-process backend, MPI): every element is issued at once, in list
 * order, as its own [Communicator.send] or [Communicator.recv] (so each is in the flight record
 * under its own name), and the batch returns when all completed. Since no element waits for
 * another before it is posted, the batch cannot deadlock whatever the order of its elements,
 * including sends above a backend's eager limit that complete only when matched.
 *
 * The caller has checked every element first (the backend's validator), so a bad argument moves
 * nothing. When an element fails, the others are cancelled (with the backend's cancellation
 * semantics for a send or receive) and the first failure is thrown.
 */
@InternalTpcommApi
public object PointToPointBatch {
    /** Issues [ops] on [comm] concurrently, in order, and returns one [MessageInfo] per element. */
    public suspend fun run(comm: Communicator, ops: List<PointToPoint>): List<MessageInfo> {
        if (ops.isEmpty()) return emptyList()
        if (ops.size == 1) return listOf(one(comm, ops[0]))
        return coroutineScope {
            // UNDISPATCHED: each element is issued before the next one is, in the caller's thread.
            ops.map { o -> async(start = CoroutineStart.UNDISPATCHED) { one(comm, o) } }.awaitAll()
        }
    }

    private suspend fun one(comm: Communicator, o: PointToPoint): MessageInfo =
        if (o.isSend) {
            comm.send(o.tensor, o.peer, o.tag)
            MessageInfo(o.peer, o.tag, o.tensor.byteSize)
        } else {
            comm.recv(o.tensor, o.peer, o.tag)
        }
}
