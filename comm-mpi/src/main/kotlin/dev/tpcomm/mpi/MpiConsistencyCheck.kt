package dev.tpcomm.mpi

import dev.tpcomm.coroutines.FlightRecorder
import dev.tpcomm.engine.Backoff
import dev.tpcomm.engine.CommunicatorFront
import dev.tpcomm.engine.NativeDispatcher
import dev.tpcomm.engine.OperationCall
import dev.tpcomm.engine.OperationFailure
import kotlinx.coroutines.Job
import java.lang.foreign.Arena
import java.lang.foreign.ValueLayout
import kotlin.coroutines.cancellation.CancellationException

/**
 * The consistency check of one MPI communicator (`CommConfig.checkConsistency`, on unless false):
 * each collective's signature ([OperationCall.encodeSignature]) is exchanged first ([MpiSignatureProtocol]'s
 * slots: one `MPI_Allgather` of digests), and a mismatch fails every rank with the front's named
 * exception before any data moves; with [slotsCarry], small collectives ride in that exchange
 * ([MpiSlotPayload]). Runs on whichever thread holds the communicator's MPI calls.
 */
internal class MpiConsistencyCheck(
    private val front: CommunicatorFront,
    val calls: MpiNativeCalls,
    private val binding: MpiBinding,
    private val handle: Long,
    private val dispatcher: NativeDispatcher,
    arena: Arena,
    /** Whether the signatures are exchanged at all. */
    val checksConsistency: Boolean,
    /**
     * Whether the exchange carries small collectives ([MpiSlotPayload]): with the check, in
     * blocking progress only. There a rank whose exchange is inside MPI finishes its call whatever
     * its caller does (as it would run the operation after the check), so a peer that finished
     * from the slots never finished something this rank did not. In non-blocking progress a
     * cancelled caller abandons its exchange, and its peers must then wait for an operation it
     * never issues (and learn of its abort), not finish one from its slot.
     */
    val slotsCarry: Boolean,
    /** The front's comparison of every rank's signatures (a mismatch as a failure, or null). */
    private val compare: (all: LongArray, sequence: Long, description: String) -> OperationFailure?,
) {
    private val abi = binding.abi
    private val failures = calls.failures
    private val signatures = MpiSignatureProtocol(front.worldSize, arena, "an MPI communicator of ${front.worldSize} ranks")

    /**
     * True while the communicator's thread runs a block whose caller is suspended elsewhere
     * ([MpiHandOffPolicy.onThread]): a `withTimeout`, `awaitAll(timeout)` or cancellation may
     * release that caller while the block is inside MPI, and the communicator is then aborted once
     * the block returns. The exchange tells the peers ([MpiSignatureProtocol.DETACHED]).
     * Communicator's thread only.
     */
    var callerDetached: Boolean = false

    /**
     * Whether the next exchange must watch the peers' abort notices ([exchangeBlocking]): set after
     * an exchange in which some rank's caller was [detached][callerDetached]. Such a rank may abandon
     * the communicator when its caller is released (issue 32 finding 4: ranks 0 and 1 passed
     * `awaitAll(timeout = 2 s)` while their all-reduce waited for rank 2, which arrived 6 s later);
     * it tells the peers with an abort notice only after its own blocking call returned, which is
     * when the peers' call returns too, so a peer's next call would otherwise be issued before the
     * notice arrives and block in an `MPI_Allgather` that rank never joins, until the
     * communicator's timeout. Read and written by whichever thread holds the communicator's MPI calls.
     */
    var watchesNotices: Boolean = false
        private set

    /** [call]'s signature as the front encodes it, or null without the consistency check. */
    fun sig(call: OperationCall): LongArray? {
        if (!checksConsistency) return null
        return LongArray(MpiSignatureProtocol.SIG_LEN).also { call.encodeSignature(it, 0) }
    }

    /**
     * A blocking collective with its consistency check, on whichever thread owns MPI now: the
     * pre-signature step ([PreSignature.blocking]), the signature's exchange, then the operation,
     * unless the exchange carried it ([payload], see [MpiSlotPayload]). The exchange and the
     * operation are one call: once the peers agreed on the digest they are entering the operation,
     * so it runs even if the caller was released meanwhile (a cancelled blocking call may still
     * complete natively; skipping it would leave them waiting).
     */
    inline fun checkedBlockingCall(
        entry: FlightRecorder.Entry, operation: String, keepAlive: Any?, sig: LongArray?, preSignature: PreSignature?,
        payload: MpiSlotPayload?, call: () -> Int,
    ) {
        if (sig != null && preSignature != null) {
            // Its all-to-all is then the first MPI call of this collective: polled, watching the notices.
            if (watchesNotices) preSignature.polling(sig, null, watchNotices = true) else preSignature.blocking(sig)
        }
        if (sig != null && exchangeBlocking(sig, operation, entry, payload)) return
        calls.runBlockingCall(operation, entry, keepAlive, call)
    }

    /**
     * The consistency check as one blocking `MPI_Allgather` of the ranks' slots ([MpiSignatureProtocol]),
     * carrying [payload] when there is one: true when the slots finished the operation (nothing is
     * left to issue), false when it must still be issued. A mismatch fails every rank here.
     */
    fun exchangeBlocking(sig: LongArray, operation: String, entry: FlightRecorder.Entry, payload: MpiSlotPayload? = null): Boolean {
        signatures.load(sig, payload, callerDetached)
        val t = abi.int64Type
        val ss = signatures.slotSend.address(); val sr = signatures.slotsReceived.address()
        if (watchesNotices) {
            // A peer's caller was detached in the previous exchange: it may have abandoned the
            // communicator since, and its notice may still be on the way. Polled, so that notice ends
            // this exchange instead of an MPI_Allgather that peer never joins.
            failures.check(binding.iallgather(ss, SLOT_LONGS, t, sr, SLOT_LONGS, t, handle, calls.scratchAddress + MpiNativeCalls.OFF_REQUEST), operation, entry)
            poll(operation, entry, null, watchNotices = true)
        } else {
            calls.runBlockingCall("$operation(signature)", entry, null) { binding.allgather(ss, SLOT_LONGS, t, sr, SLOT_LONGS, t, handle) }
        }
        watchesNotices = signatures.anyDetached()
        if (signatures.digestsAgree()) return finishFromSlots(payload)
        // Every rank saw the difference: all gather the full signatures to name the ranks and fields.
        signatures.loadWords(sig)
        val s = signatures.send.address(); val r = signatures.received.address()
        calls.runBlockingCall("$operation(signature)", entry, null) { binding.allgather(s, SIG_LEN, t, r, SIG_LEN, t, handle) }
        failMismatch(operation, entry)
    }

    /**
     * [exchangeBlocking] with `MPI_Iallgather`s polled on the communicator's thread ([poll]),
     * never carrying the operation ([slotsCarry]). [callerJob]: the caller's job, whose
     * cancellation ends the exchange (its caller waits elsewhere).
     */
    fun exchangePolling(sig: LongArray, operation: String, entry: FlightRecorder.Entry, callerJob: Job?) {
        signatures.load(sig, null, callerJob != null)
        val req = calls.scratchAddress + MpiNativeCalls.OFF_REQUEST
        val t = abi.int64Type
        failures.check(binding.iallgather(signatures.slotSend.address(), SLOT_LONGS, t, signatures.slotsReceived.address(), SLOT_LONGS, t, handle, req), operation, entry)
        poll(operation, entry, callerJob, watchesNotices)
        watchesNotices = signatures.anyDetached()
        if (signatures.digestsAgree()) return
        // Every rank saw the difference: all gather the full signatures to name the ranks and fields.
        signatures.loadWords(sig)
        failures.check(binding.iallgather(signatures.send.address(), SIG_LEN, t, signatures.received.address(), SIG_LEN, t, handle, req), operation, entry)
        poll(operation, entry, callerJob)
        failMismatch(operation, entry)
    }

    /**
     * After the digests agreed: finishes the operation from the slots when every rank carried its
     * part (every rank reads the same flags, so every rank decides the same), true when it did.
     */
    private fun finishFromSlots(payload: MpiSlotPayload?): Boolean {
        if (payload == null || !signatures.allCarried()) return false
        payload.finish(signatures.payloads)
        return true
    }

    /**
     * Polls the request in the scratch's request word until done, this call's deadline passes
     * ([MpiFailures.deadlinePassed]), the caller is cancelled, or, with [watchNotices], a peer's
     * abort notice arrives ([MpiFailures.checkAbortNotices]: a peer that abandoned the communicator
     * never joins this exchange).
     */
    fun poll(operation: String, entry: FlightRecorder.Entry, callerJob: Job?, watchNotices: Boolean = false) {
        val req = calls.scratchAddress + MpiNativeCalls.OFF_REQUEST
        val flag = calls.scratchAddress + MpiNativeCalls.OFF_FLAG
        // The dispatcher's wait policy (spin, yield, then park up to its longest park), not a spin
        // that could last until the deadline while a peer is late.
        val backoff = Backoff(dispatcher.spinIterations, yieldIterations = 16, dispatcher.maxParkNanos)
        while (true) {
            failures.check(binding.test(req, flag, abi.statusIgnore), operation, entry)
            if (calls.scratch.get(ValueLayout.JAVA_INT, MpiNativeCalls.OFF_FLAG) != 0) break
            // This call's own deadline ends it. A peer's abort notice ends it only with watchNotices
            // (a first exchange after a detached caller): the second exchange, after the digests
            // differed, completes (a peer that found a mismatch has sent its words), so every rank
            // names the mismatch itself.
            entry.timeout?.let { throw it }
            if (watchNotices) failures.checkAbortNotices(operation, entry)
            if (callerJob?.isCancelled == true) {
                // The signature exchange stays in flight: its buffers belong to the (now broken) communicator.
                throw CancellationException("cancelled while exchanging the signature of $operation")
            }
            backoff.idle()
        }
    }

    private fun failMismatch(operation: String, entry: FlightRecorder.Entry): Nothing {
        // The digests differed, so the full signatures do (a digest collision the other way round
        // is impossible: equal signatures have equal digests).
        val m = compare(signatures.all(), entry.sequence, signatures.description)
            ?: error("$operation: the signature digests differ across ranks but the signatures do not")
        val e = front.exceptionOf(m, operation, entry.sequence)
        failures.markBroken(e)
        throw e
    }

    /** Work on the MPI thread before the signature's exchange: it may complete the signature (its extra word). */
    interface PreSignature {
        /** As one blocking MPI call. */
        fun blocking(sig: LongArray)

        /** Polled on the MPI thread; [watchNotices]: a peer's abort notice ends it ([poll]). */
        fun polling(sig: LongArray, callerJob: Job?, watchNotices: Boolean = false)
    }

    companion object {
        const val SIG_LEN: Int = MpiSignatureProtocol.SIG_LEN
        const val SLOT_LONGS: Int = MpiSignatureProtocol.SLOT_LONGS
    }
}
