@file:JvmName("AwaitHandles")

package dev.tpcomm.coroutines

import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.Communicator
import dev.tpcomm.spi.CommunicationErrors
import kotlinx.coroutines.Deferred
import kotlinx.coroutines.NonCancellable
import kotlinx.coroutines.withContext
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.selects.select
import kotlinx.coroutines.withTimeoutOrNull
import kotlin.time.Duration

/**
 * Waits for every handle in this collection and returns their results in order, or throws
 * [CommunicationTimeoutException] if they have not all completed within [timeout].
 *
 * If a handle fails, its exception is thrown at once (as `kotlinx.coroutines.awaitAll` does), with
 * the other handles left running. When the deadline passes, the handles that have not completed
 * are cancelled and joined if [cancelOnTimeout] (the default): a deadline on a collective is a timeout of that
 * collective, and cancelling a collective in flight aborts its communicator on every rank, so
 * nothing is left waiting. With `cancelOnTimeout = false` they keep running and the caller may
 * wait again. [comm], when given, names the rank and backend in the exception.
 *
 * @throws IllegalArgumentException if [timeout] is not positive.
 */
public suspend fun <T> Collection<Deferred<T>>.awaitAll(
    timeout: Duration,
    comm: Communicator? = null,
    cancelOnTimeout: Boolean = true,
): List<T> {
    require(timeout.isPositive()) { "awaitAll: timeout must be positive, got $timeout" }
    if (isEmpty()) return emptyList()
    val handles = toList()
    return withTimeoutOrNull(timeout) { handles.awaitAll() } ?: run {
        val pending = handles.indices.filter { !handles[it].isCompleted }
        if (pending.isEmpty()) return handles.awaitAll() // everything completed right at the deadline
        if (cancelOnTimeout) pending.map { handles[it] }.cancelAndJoinAll()
        throw timeoutException(
            "awaitAll",
            "${pending.size} of ${handles.size} handles (indices ${pending.summary()}) did not complete within $timeout" +
                if (cancelOnTimeout) "; they were cancelled, which aborts their communicators" else "",
            comm,
        )
    }
}

/**
 * Waits until the first handle of this collection completes and returns its index and result,
 * or throws [CommunicationTimeoutException] if none completes within [timeout].
 *
 * The first handle to complete decides: if it failed, its exception is thrown. The other handles
 * keep running and can be awaited later. When the deadline passes with none completed, every
 * handle is cancelled and joined if [cancelOnTimeout] (the default; cancelling a collective in flight aborts
 * its communicator), or left running otherwise. [comm], when given, names the rank and backend in
 * the exception.
 *
 * @throws IllegalArgumentException if the collection is empty or [timeout] is not positive.
 */
public suspend fun <T> Collection<Deferred<T>>.awaitFirst(
    timeout: Duration,
    comm: Communicator? = null,
    cancelOnTimeout: Boolean = true,
): IndexedValue<T> {
    require(isNotEmpty()) { "awaitFirst: there is nothing to wait for; pass at least one handle" }
    require(timeout.isPositive()) { "awaitFirst: timeout must be positive, got $timeout" }
    val handles = toList()
    val first = withTimeoutOrNull(timeout) {
        select {
            handles.forEachIndexed { i, h -> h.onAwait { IndexedValue(i, it) } }
        }
    }
    if (first != null) return first
    handles.indexOfFirst { it.isCompleted }.takeIf { it >= 0 }?.let { return IndexedValue(it, handles[it].await()) }
    if (cancelOnTimeout) handles.cancelAndJoinAll()
    throw timeoutException(
        "awaitFirst",
        "none of ${handles.size} handles completed within $timeout" +
            if (cancelOnTimeout) "; they were cancelled, which aborts their communicators" else "",
        comm,
    )
}

/** Cancels every handle, then waits until each has finished (its communicator aborted), so nothing outlives the timeout. */
private suspend fun List<Deferred<*>>.cancelAndJoinAll() {
    forEach { it.cancel() }
    withContext(NonCancellable) { forEach { it.join() } }
}

private fun List<Int>.summary(): String = if (size <= 16) joinToString() else take(16).joinToString() + ", ..."

private fun timeoutException(operation: String, message: String, comm: Communicator?): CommunicationTimeoutException =
    CommunicationErrors(comm?.rank ?: -1, comm?.backendName ?: "unknown").timeout(operation, -1, message)
