package dev.tpcomm.coroutines.local

import dev.tpcomm.coroutines.OperationFailure
import java.util.concurrent.atomic.AtomicInteger
import java.util.concurrent.atomic.AtomicReferenceArray

/**
 * One communicator group of a local world (the world itself or a group made by split/group):
 * [size] ranks, the ring of [OpSlot]s where their collectives meet, and one [Mailbox] per rank
 * for point-to-point messages. Each group has its own sequence numbers.
 */
internal class LocalGroup(val world: LocalWorldState, val size: Int, val description: String) {
    private val ring = AtomicReferenceArray<OpSlot?>(RING)
    val mailboxes: Array<Mailbox> = Array(size) { Mailbox(this, it) }
    val communicators: Array<LocalCommunicator> = Array(size) { LocalCommunicator(this, it) }
    private val closedCount = AtomicInteger()
    @Volatile var firstClosedRank: Int = -1

    val anyClosed: Boolean get() = closedCount.get() > 0

    init {
        world.groups.add(this)
    }

    /**
     * The slot serving operation [seq], or null when the ring position still serves an older
     * operation (a rank is more than the ring size ahead); the caller then waits with [awaitSlotFor].
     */
    fun slotFor(seq: Long): OpSlot? {
        val i = ((seq - 1) % RING).toInt()
        while (true) {
            val s = ring.get(i)
            if (s == null) {
                val created = OpSlot(size, seq, RING)
                if (ring.compareAndSet(i, null, created)) return created
                continue
            }
            return if (s.seq == seq) s else null
        }
    }

    /**
     * Suspends until the ring position of operation [seq] may serve it (the slot there was recycled)
     * or the world aborted; the caller then tries [slotFor] again. Woken by the recycle itself.
     */
    suspend fun awaitSlotFor(seq: Long) {
        val s = ring.get(((seq - 1) % RING).toInt()) ?: return
        s.awaitGeneration(seq) { world.abortCause != null }
    }

    /** Fails every pending slot and receive of this group (world abort); wakes the ranks waiting for a slot. */
    fun failPending(specific: OperationFailure?, generic: OperationFailure, timedOut: Any?) {
        for (i in 0 until RING) {
            val s = ring.get(i) ?: continue
            s.fail(if (specific != null && s === timedOut) specific else generic)
            s.wakeGenerationWaiters()
        }
        for (m in mailboxes) m.failAll(generic, timedOut, specific)
    }

    fun rankClosed(rank: Int) {
        val closedNow = closedCount.incrementAndGet()
        if (closedNow == 1) firstClosedRank = rank
        if (closedNow == size && world.rootGroup === this) {
            world.close(communicators[rank].closeFailure("every rank closed its communicator"))
            return
        }
        // Somebody already waiting for this rank can never finish: abort rather than let them time out.
        for (i in 0 until RING) {
            val s = ring.get(i) ?: continue
            if (s.state.get() == OpSlot.PENDING && s.arrived.get() > 0 && !s.present[rank]) {
                world.abort(
                    communicators[rank].closeFailure("rank $rank of $description closed its communicator while other ranks waited for it in ${OpKind.name(s.kinds.firstPresent(s))}"),
                )
                return
            }
        }
        if (mailboxes[rank].hasWaitingSend()) {
            world.abort(
                communicators[rank].closeFailure("rank $rank of $description closed its communicator while a send to it waited for its receive"),
            )
            return
        }
        for (m in mailboxes) if (m.hasWaiterFor(rank)) {
            world.abort(
                communicators[rank].closeFailure("rank $rank of $description closed its communicator while rank ${m.owner} waited to receive from it"),
            )
            return
        }
    }

    private fun IntArray.firstPresent(s: OpSlot): Int {
        for (r in 0 until size) if (s.present[r]) return this[r]
        return this[0]
    }

    fun markAllClosed() {
        for (c in communicators) c.markClosed()
    }

    /** Watchdog pass over this group (deadlines); returns true when it aborted the world. */
    fun watchdogPass(now: Long): Boolean {
        val timeoutNanos = world.config.timeout.inWholeNanoseconds
        for (i in 0 until RING) {
            val s = ring.get(i) ?: continue
            if (s.state.get() != OpSlot.PENDING || s.arrived.get() == 0) continue
            val first = s.firstArrivalNanos
            if (first != 0L && now - first > timeoutNanos) {
                val waiting = (0 until size).filter { s.present[it] }
                val missing = (0 until size).filter { !s.present[it] }
                if (s.state.get() != OpSlot.PENDING || missing.isEmpty()) continue
                val r0 = waiting.firstOrNull() ?: continue
                val name = OpKind.name(s.kinds[r0])
                val msg = "$name timed out after ${world.config.timeout}: rank(s) $missing of $description never arrived; rank(s) $waiting waited"
                val reason = communicators[r0].exceptionOf(OperationFailure(OperationFailure.TIMEOUT, msg), name, s.recorderSeqs[r0])
                if (world.abort(reason, OperationFailure(OperationFailure.TIMEOUT, msg, reason), s)) return true
            }
        }
        if (sendsTimedOut(now, timeoutNanos)) return true
        for (m in mailboxes) if (m.checkTimeout(now, timeoutNanos)) return true
        return false
    }

    /**
     * Aborts the world when a send above the eager limit waited longer than the timeout for its
     * receive (typically every rank sending before it receives). That send, and every other send
     * still waiting for a receive (the rest of the cycle, started a little later), fail with the
     * same [dev.tpcomm.CommunicationTimeoutException], which names the limit.
     */
    private fun sendsTimedOut(now: Long, timeoutNanos: Long): Boolean {
        if (mailboxes.none { it.lateSends(now, timeoutNanos).isNotEmpty() }) return false
        val late = mailboxes.flatMap { box -> box.lateSends(now, -1).map { box.owner to it } }
        if (late.isEmpty()) return false
        val (dst, first) = late.first()
        val pairs = late.joinToString(", ") { (to, m) -> "${m.source}->$to" }
        val msg = "send timed out after ${world.config.timeout}: rank(s) ${late.map { it.second.source }.distinct().sorted()} of $description " +
            "waited for their receivers to post a matching receive (sender->receiver: $pairs). " + mailboxes[dst].rendezvousAdvice(first.byteSize, dst)
        val reason = communicators[first.source].exceptionOf(OperationFailure(OperationFailure.TIMEOUT, msg), first.operation, first.recorderSeq)
        return world.abort(reason, OperationFailure(OperationFailure.TIMEOUT, msg, reason), late.map { it.second })
    }

    companion object {
        /** Ring size: how many collectives one rank may issue ahead of the slowest before waiting for a slot. */
        const val RING = 256
    }
}
