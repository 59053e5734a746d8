@file:JvmName("Overlap")

package dev.tpcomm.coroutines

import dev.tpcomm.Communicator
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.Deferred
import kotlinx.coroutines.async
import kotlinx.coroutines.coroutineScope

/**
 * Runs [communication] and [compute] concurrently and returns both results: the communication is
 * issued first, at once and in the caller's thread (so collectives it calls keep program order),
 * then [compute] runs in the calling coroutine while the communication proceeds.
 *
 * Returns when both have finished. If either fails, the other is cancelled and the failure is
 * thrown (structured concurrency); cancelling a collective in flight aborts its communicator.
 * [compute] must not touch the tensors [communication] is moving.
 *
 * For overlap to happen, the thread [compute] runs on must not be the only one able to progress the
 * communication; every tpcomm backend progresses collectives off the caller's thread when the
 * context has [Overlapping], which [communication] runs with.
 */
public suspend fun <C, R> overlap(communication: suspend () -> C, compute: suspend () -> R): Pair<C, R> = coroutineScope {
    val comm = async(Overlapping, start = CoroutineStart.UNDISPATCHED) { communication() }
    val result = compute()
    comm.await() to result
}

/**
 * Software pipeline over [count] items: item `i` is computed by [compute], then handed to
 * [communicate], which is issued at once without waiting, so item `i`'s communication overlaps item
 * `i + 1`'s compute. Returns the communication results in item order.
 *
 * [compute] calls run one after another in the calling coroutine, in item order. [communicate]
 * calls are issued in item order in the calling coroutine's thread (collectives keep program
 * order); at most [maxInFlight] of them are outstanding, the oldest awaited before a new one is
 * issued. On failure of any call the others are cancelled and the failure is thrown; cancelling a
 * collective in flight aborts its communicator.
 *
 * @throws IllegalArgumentException if [count] < 0 or [maxInFlight] < 1.
 */
public suspend fun <T, R> pipeline(
    count: Int,
    maxInFlight: Int = Int.MAX_VALUE,
    compute: suspend (index: Int) -> T,
    communicate: suspend (index: Int, value: T) -> R,
): List<R> {
    require(count >= 0) { "pipeline: count must be >= 0, got $count" }
    require(maxInFlight >= 1) { "pipeline: maxInFlight must be >= 1, got $maxInFlight" }
    return coroutineScope {
        val handles = ArrayList<Deferred<R>>(count)
        for (i in 0 until count) {
            val value = compute(i)
            if (i - maxInFlight >= 0) handles[i - maxInFlight].await()
            handles += async(Overlapping, start = CoroutineStart.UNDISPATCHED) { communicate(i, value) }
        }
        handles.map { it.await() }
    }
}

/**
 * Pipelined all-reduce of [chunks]: for each chunk in order, [compute] fills it (for example the
 * gradient of one layer), then its all-reduce with [op] is issued at once, so chunk `i`'s
 * all-reduce overlaps chunk `i + 1`'s compute. Returns [chunks], each reduced in place, once every
 * all-reduce has finished.
 *
 * Every rank must pass chunks of matching dtypes and shapes in the same order. [compute] must not
 * touch a chunk whose all-reduce was issued. At most [maxInFlight] all-reduces are outstanding.
 * Failure and cancellation as in [pipeline].
 */
public suspend fun Communicator.allReducePipelined(
    chunks: List<Tensor>,
    op: ReduceOp = ReduceOp.Sum,
    maxInFlight: Int = Int.MAX_VALUE,
    compute: suspend (index: Int, chunk: Tensor) -> Unit,
): List<Tensor> = pipeline(
    count = chunks.size,
    maxInFlight = maxInFlight,
    compute = { i -> compute(i, chunks[i]); chunks[i] },
    communicate = { _, chunk -> allReduce(chunk, op) },
)
