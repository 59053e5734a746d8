package dev.tpcomm.engine

import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.spi.CollectiveOp
import kotlinx.coroutines.currentCoroutineContext
import kotlinx.coroutines.ensureActive
import kotlin.coroutines.CoroutineContext

/**
 * The front's path of one collective, from its number to its release, in the order docs/ARCHITECTURE.md
 * draws: numbered, recorded and timed in call order ([CallOrder], waiting for the issue turn while a
 * composite operation holds it), the output allocated (allocating forms), the tensors retained, issued
 * on the backend ([CommunicatorBackend.issue], then [CommunicatorBackend.await] when pending), completed or
 * failed with the named exception, the tensors released (unless the backend took them over). A call
 * given up before its issue goes to the front's rule ([CommunicatorFront.abortNotIssued]).
 *
 * One per communicator, owned by its [front]; thread-safe as [CallOrder] is.
 */
internal class CollectiveIssue(private val front: CommunicatorFront, private val order: CallOrder) {
    /**
     * Validates nothing (the operation methods did), then: usable, sequence and record under the
     * lock; retain; [CommunicatorBackend.issue]; complete or fail; release. The common case (the backend completed in
     * [CommunicatorBackend.issue]) runs without a coroutine state machine: [issueBegun] and [finishPending] are tail calls.
     */
    suspend fun <T> collective(
        op: CollectiveOp, input: Tensor?, output: Tensor?, sig: Tensor?, reduceOp: ReduceOp?, root: Int, dim: Int,
        sizes: List<Int>?, outputSizes: List<Int>?, extra: Any?, ret: T,
    ): T {
        // A coroutine already cancelled does not issue: nothing is in flight yet.
        val context = currentCoroutineContext()
        context.ensureActive()
        val call = order.tryBegin(op, input, output, sig, reduceOp, root, dim, sizes, outputSizes, extra, context)
            ?: return collectiveInTurn(op, input, output, sig, reduceOp, root, dim, sizes, outputSizes, extra, context, ret)
        call.context = context
        return issueBegun(call, ret, null)
    }

    /**
     * [collective] of a caller that must first wait for the issue turn (a composite operation is
     * issuing): it holds the turn until the backend took the call ([CommunicatorBackend.issue] returned), so that the
     * next caller's call cannot reach a backend that orders calls as they reach it (the GPU engine's
     * device thread) before this one.
     */
    private suspend fun <T> collectiveInTurn(
        op: CollectiveOp, input: Tensor?, output: Tensor?, sig: Tensor?, reduceOp: ReduceOp?, root: Int, dim: Int,
        sizes: List<Int>?, outputSizes: List<Int>?, extra: Any?, context: CoroutineContext, ret: T,
    ): T {
        val turn = order.turn.await()
        val call = order.numberInTurn(turn, op, input, output, sig, reduceOp, root, dim, sizes, outputSizes, extra)
        call.context = context
        return issueBegun(call, ret, turn)
    }

    /**
     * An allocating collective: as [collective], but its output (of [shape], [input]'s dtype) is
     * allocated once the call is numbered, recorded and timed ([CommunicatorBackend.allocate] with the call), so that an
     * allocation that waits is within the call's deadline. A failed (or cancelled) allocation fails
     * the recorded call and issues nothing. Returns the output.
     */
    suspend fun allocating(
        op: CollectiveOp, input: Tensor, shape: List<Int>, reduceOp: ReduceOp?, root: Int, dim: Int,
        sizes: List<Int>?, outputSizes: List<Int>?,
    ): Tensor {
        val context = currentCoroutineContext()
        context.ensureActive()
        var turn: IssueTurn.Waiter? = null
        val call = order.tryBegin(op, input, null, input, reduceOp, root, dim, sizes, outputSizes, null, context)
            ?: order.turn.await().let { w -> turn = w; order.numberInTurn(w, op, input, null, input, reduceOp, root, dim, sizes, outputSizes, null) }
        call.context = context
        val output = try {
            front.backend.allocate(call, input.dtype, shape)
        } catch (t: Throwable) {
            turn?.let { order.turn.pass(it) }
            val e = front.failure(call.entry, t)
            front.gaveUp(call, e)
            throw e
        }
        call.output = output
        return issueBegun(call, output, turn)
    }

    /**
     * Retain, [CommunicatorBackend.issue], complete or fail, release, for a [call] already begun (and its output
     * allocated); [turn], when the caller waited for the issue turn, is passed on once [CommunicatorBackend.issue] returned.
     */
    private suspend fun <T> issueBegun(call: OperationCall, ret: T, turn: IssueTurn.Waiter?): T {
        val input = call.input
        val output = call.output
        val heldOutput = try {
            retain(call.name, input, output).also { call.heldOutput = it }
        } catch (t: Throwable) {
            if (turn != null) order.turn.pass(turn)
            // A tensor closed meanwhile: the call is numbered and recorded but will never be issued.
            call.entry.fail(t)
            front.gaveUp(call, t)
            throw t
        }
        val r = try {
            front.backend.issue(call)
        } catch (t: Throwable) {
            if (turn != null) order.turn.pass(turn)
            if (!call.entry.tensorsHandedOver) release(input, output, heldOutput)
            throw front.failure(call.entry, t)
        }
        if (turn != null) order.turn.pass(turn)
        if (r === CommunicatorFront.PENDING) return finishPending(call, ret, heldOutput)
        call.entry.complete()
        if (!call.entry.tensorsHandedOver) release(input, output, heldOutput)
        @Suppress("UNCHECKED_CAST")
        return (r ?: ret) as T
    }

    private suspend fun <T> finishPending(call: OperationCall, ret: T, heldOutput: Boolean): T {
        try {
            val r = front.backend.await(call)
            call.entry.complete()
            @Suppress("UNCHECKED_CAST")
            return (r ?: ret) as T
        } catch (t: Throwable) {
            throw front.failure(call.entry, front.callerSees(t))
        } finally {
            if (!call.entry.tensorsHandedOver) release(call.input, call.output, heldOutput)
        }
    }

    /** Retains [input] and [output] (see [Tensor.retain]); returns whether [output] was retained (not null, not [input]). */
    private fun retain(name: String, input: Tensor?, output: Tensor?): Boolean {
        input?.retain(name)
        if (output == null || output === input) return false
        try {
            output.retain(name)
        } catch (t: Throwable) {
            input?.release(); throw t
        }
        return true
    }

    fun release(input: Tensor?, output: Tensor?, heldOutput: Boolean) {
        input?.release()
        if (heldOutput) output!!.release()
    }
}
