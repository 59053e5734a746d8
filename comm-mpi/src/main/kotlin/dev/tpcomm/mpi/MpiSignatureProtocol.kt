package dev.tpcomm.mpi

import dev.tpcomm.spi.CollectiveSignature
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

/**
 * The consistency check of one [MpiCommunicator] (`CommConfig.checkConsistency`, on by default)
 * over the core's one signature encoding ([CollectiveSignature]). Before each collective every rank
 * loads its call into a [SLOT_BYTES]-byte slot ([load]) and the communicator all-gathers the slots
 * (`MPI_Allgather` of [SLOT_LONGS] longs, [slotSend] into [slotsReceived]). A slot holds:
 *
 * - `[0, 8)`: the digest of the rank's signature ([CollectiveSignature.digest]);
 * - `[8, 16)`: flags: bit 0 ([CARRIED]) when the rank carries its part of the operation in the
 *   slot ([MpiSlotPayload]); bit 1 ([DETACHED]) when the rank's caller may be released before the
 *   call completes (it waits suspended elsewhere: a `withTimeout`, `awaitAll(timeout)` or
 *   cancellation can give up on it), so that the rank may abandon the communicator after the call
 *   and never join the next one ([anyDetached]);
 * - `[16, 64)`: that part ([PAYLOAD_BYTES] bytes at most: a small all-reduce's elements, a
 *   broadcast root's).
 *
 * Every rank then sees every rank's slot, so all of them reach the same two decisions from the
 * same bytes: the call goes ahead when every digest equals its own ([digestsAgree]); otherwise every
 * rank all-gathers the full signatures ([send] into [received]) and the front compares [all] of
 * them, naming the ranks and fields that differ from rank 0's. When the digests agree and every rank
 * carried its part ([allCarried]), the operation is finished from the slots ([payloads]) and never
 * issued: the check and a small collective are one MPI call (in blocking progress only, see
 * `MpiCommunicator.slotsCarry`). Whether a rank can carry its part
 * depends on its own tensor (a CUDA-aware device pointer cannot be copied here), which the
 * signature does not fix; so it is each rank's flag, and one rank that cannot makes every rank
 * issue the operation.
 *
 * The buffers live in [arena] (native, allocated once). Used by one thread at a time (whichever
 * holds the communicator's MPI calls).
 */
internal class MpiSignatureProtocol(private val worldSize: Int, arena: Arena, val description: String) {
    /** This rank's signature, as sent when the digests differ. */
    val send: MemorySegment = arena.allocate(8L * SIG_LEN, 64)

    /** Every rank's signature after the all-gather, rank order. */
    val received: MemorySegment = arena.allocate(8L * SIG_LEN * worldSize, 64)

    /** This rank's slot, as sent to the all-gather. */
    val slotSend: MemorySegment = arena.allocate(SLOT_BYTES, 64)

    /** Every rank's slot after the all-gather, rank order. */
    val slotsReceived: MemorySegment = arena.allocate(SLOT_BYTES * worldSize, 64)

    private val sendPayload: MemorySegment = slotSend.asSlice(PAYLOAD_AT, PAYLOAD_BYTES)

    /** Rank r's part as its slot carried it, for r in rank order (read after [allCarried]; do not modify the array). */
    val payloads: Array<MemorySegment?> =
        Array(worldSize) { slotsReceived.asSlice(SLOT_BYTES * it + PAYLOAD_AT, PAYLOAD_BYTES) }

    /**
     * Fills [slotSend] for [sig]: its digest, then [payload]'s part when there is one and it
     * [can][MpiSlotPayload.canCarry] be carried, and whether this rank's caller is [detached]
     * (bit [DETACHED]). The words themselves go to [send] only when the digests differ ([loadWords]).
     */
    fun load(sig: LongArray, payload: MpiSlotPayload?, detached: Boolean = false) {
        slotSend.set(ValueLayout.JAVA_LONG, 0, CollectiveSignature.digest(sig))
        val carried = payload != null && payload.canCarry()
        slotSend.set(ValueLayout.JAVA_LONG, FLAG_AT, (if (carried) CARRIED else 0L) or (if (detached) DETACHED else 0L))
        if (carried) payload!!.write(sendPayload)
    }

    /** Copies [sig] into [send], for the all-gather of the full signatures after the digests differed. */
    fun loadWords(sig: LongArray) {
        MemorySegment.copy(sig, 0, send, ValueLayout.JAVA_LONG, 0, SIG_LEN)
    }

    /** True when every rank's digest is this rank's own: every rank called the same. */
    fun digestsAgree(): Boolean {
        val mine = slotSend.get(ValueLayout.JAVA_LONG, 0)
        for (r in 0 until worldSize) if (slotsReceived.get(ValueLayout.JAVA_LONG, SLOT_BYTES * r) != mine) return false
        return true
    }

    /** True when every rank carried its part in its slot (read after [digestsAgree]). */
    fun allCarried(): Boolean {
        for (r in 0 until worldSize) if (slotsReceived.get(ValueLayout.JAVA_LONG, SLOT_BYTES * r + FLAG_AT) and CARRIED == 0L) return false
        return true
    }

    /**
     * True when the caller of any rank, this one included, was [detached][load] in the call just
     * exchanged (read after the exchange). Every rank reads the same slots, so every rank decides the
     * same: the next exchange is polled on all of them or on none. (Counting only the peers, as a
     * first version did, let a rank whose own caller was detached, and not released, block in
     * `MPI_Allgather` while its peers polled an `MPI_Iallgather`, which MPI never matches with it:
     * the MPI demo hung on both ranks in `MpiDemoTest`.)
     */
    fun anyDetached(): Boolean {
        for (r in 0 until worldSize) {
            if (slotsReceived.get(ValueLayout.JAVA_LONG, SLOT_BYTES * r + FLAG_AT) and DETACHED != 0L) return true
        }
        return false
    }

    /** Every rank's signature, as [received] holds them after the all-gather. */
    fun all(): LongArray = LongArray(SIG_LEN * worldSize) { received.getAtIndex(ValueLayout.JAVA_LONG, it.toLong()) }

    companion object {
        const val SIG_LEN: Int = CollectiveSignature.SIZE

        /** One rank's slot in the all-gather, in bytes (one cache line). */
        const val SLOT_BYTES: Long = 64

        /** [SLOT_BYTES] in 64-bit words, the all-gather's count. */
        const val SLOT_LONGS: Int = (SLOT_BYTES / 8).toInt()

        /** Where a slot's carried flag is. */
        const val FLAG_AT: Long = 8

        /** The flag bit: the rank carried its part in its slot. */
        const val CARRIED: Long = 1L

        /** The flag bit: the rank's caller may be released before the call completes. */
        const val DETACHED: Long = 2L

        /** Where a slot's payload starts. */
        const val PAYLOAD_AT: Long = 16

        /** The most bytes of an operation a slot carries. */
        const val PAYLOAD_BYTES: Long = SLOT_BYTES - PAYLOAD_AT
    }
}
