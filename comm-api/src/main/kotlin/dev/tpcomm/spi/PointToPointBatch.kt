package dev.tpcomm.spi

import dev.tpcomm.Communicator
import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.MessageInfo
import dev.tpcomm.PointToPoint
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.Deferred
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.coroutineScope

/**
 * [Communicator.sendRecv] for backends whose [Communicator.send] and [Communicator.recv] are
 * non-blocking underneath (the in-process backend, MPI): every element is issued at once, in list
 * order, as its own [Communicator.send] or [Communicator.recv] (so each is in the flight record
 * under its own name), and the batch returns when all completed. Since no send waits for any
 * other element before it is posted, the batch cannot deadlock whatever the order of its elements,
 * including sends above a backend's eager limit that complete only when matched. A receive that
 * could take the same message as an earlier receive of the batch (same peer and tag, or a
 * wildcard) is issued when that one completed, so receives match in list order on any backend.
 *
 * The caller has checked every element first (the backend's validator), so a bad argument moves
 * nothing. When an element fails, the others are cancelled (with the backend's cancellation
 * semantics for a send or receive) and the first failure is thrown.
 */
@InternalTpcommApi
public object PointToPointBatch {
    /**
     * Issues [ops] on [comm] concurrently, in order, each element through [Communicator.send] or
     * [Communicator.recv] (which check it again: for a communicator that has no other entry points),
     * and returns one [MessageInfo] per element.
     */
    public suspend fun run(comm: Communicator, ops: List<PointToPoint>): List<MessageInfo> =
        run(ops, { o -> comm.send(o.tensor, o.peer, o.tag) }, { o -> comm.recv(o.tensor, o.peer, o.tag) })

    /**
     * Issues [ops] concurrently, in order, each send through [send] and each receive through [recv]
     * (a send or receive of arguments the caller already checked, recorded as its own operation;
     * [recv] returns what [Communicator.recv] returns), and returns one [MessageInfo] per element (for
     * a send its destination, tag and byte size). The batch semantics are those of the other [run].
     */
    public suspend fun run(
        ops: List<PointToPoint>,
        send: suspend (PointToPoint) -> Unit,
        recv: suspend (PointToPoint) -> MessageInfo,
    ): List<MessageInfo> {
        val issue: suspend (PointToPoint) -> MessageInfo = { o ->
            if (o.isSend) {
                send(o)
                MessageInfo(o.peer, o.tag, o.tensor.byteSize)
            } else {
                recv(o)
            }
        }
        if (ops.isEmpty()) return emptyList()
        if (ops.size == 1) return listOf(issue(ops[0]))
        return coroutineScope {
            val started = ArrayList<Deferred<MessageInfo>>(ops.size)
            for ((i, o) in ops.withIndex()) {
                // A receive that could take the message of an earlier receive of the batch is issued once
                // that one completed, so the batch's receives match in list order on any backend (a
                // backend may match concurrent receives in any order); messages between two ranks arrive
                // in order, so this never waits for anything the earlier receive was not waiting for.
                val before = if (o.isSend) emptyList() else (0 until i).filter { j -> !ops[j].isSend && mayTakeSameMessage(ops[j], o) }.map { started[it] }
                // UNDISPATCHED: each element is issued before the next one is, in the caller's thread.
                started += async(start = CoroutineStart.UNDISPATCHED) {
                    for (d in before) d.await()
                    issue(o)
                }
            }
            started.awaitAll()
        }
    }

    private fun mayTakeSameMessage(a: PointToPoint, b: PointToPoint): Boolean =
        (a.peer == b.peer || a.peer == Communicator.ANY_SOURCE || b.peer == Communicator.ANY_SOURCE) &&
            (a.tag == b.tag || a.tag == Communicator.ANY_TAG || b.tag == Communicator.ANY_TAG)
}
