package dev.tpcomm.coroutines.local

import dev.tpcomm.engine.CommunicatorFront
import dev.tpcomm.engine.OperationFailure
import java.util.concurrent.atomic.AtomicInteger
import java.util.concurrent.atomic.AtomicReference
import java.util.concurrent.atomic.AtomicReferenceArray

/**
 * One communicator group of a local world (the world itself or a group made by split/group):
 * [size] ranks, the ring of [OpSlot]s where their collectives meet, and one [Mailbox] per rank
 * for point-to-point messages: the in-process library's communicator, shared by its ranks. Each
 * group has its own sequence numbers and its own abort flag (the library's, as `ncclCommAbort` sets
 * NCCL's): a failure of one of its calls ([abort]) fails the slots and messages in flight on every
 * rank and aborts the front of each rank's communicator ([CommunicatorFront.abortWith], which holds
 * the communicator's one failure state), and no other group's, neither the one it was split from
 * nor those split from it (MPI's and NCCL's communicators fail one at a time too). Only the abort
 * of the whole world ([LocalWorldState.abort]) reaches every group.
 */
internal class LocalGroup(val world: LocalWorldState, val size: Int, val description: String) {
    private val ring = AtomicReferenceArray<OpSlot?>(RING)
    val mailboxes: Array<Mailbox> = Array(size) { Mailbox(this, it) }
    val backends: Array<LocalBackend> = Array(size) { LocalBackend(this, it) }

    /** Each rank's communicator: its backend composed into a front. */
    val communicators: Array<CommunicatorFront> = Array(size) { backends[it].compose() }
    private val closedCount = AtomicInteger()
    @Volatile var firstClosedRank: Int = -1

    /** Why this group was aborted (the first cause wins), or null while it is usable: what its slots and mailboxes fail with. */
    private val aborted = AtomicReference<Throwable?>(null)

    /** The first failure of this group (or the world's abort), or null while it is usable. */
    val abortCause: Throwable? get() = aborted.get()

    val anyClosed: Boolean get() = closedCount.get() > 0

    init {
        world.groups.add(this)
        // A split that completes while the world is being aborted: the abort may have missed this group.
        world.worldAbortCause?.let { abort(it) }
    }

    /**
     * Aborts this group with [reason] as the original cause: every pending slot fails with [failure]
     * when it is [timedOut] (the slot, receive or sends that passed the deadline), with a generic
     * abort failure otherwise, and every pending receive and waiting send fails; later calls fail
     * with CommunicatorAbortedException. Other groups are not touched. Returns false if this group
     * was already aborted.
     */
    fun abort(reason: Throwable, failure: OperationFailure? = null, timedOut: Any? = null): Boolean {
        val won = aborted.compareAndSet(null, reason)
        // Each rank's front records the group's first cause first (its own abort, if it came first,
        // already holds it: the first cause wins there too), so a rank woken below finds its front
        // aborted. A caller whose abort lost does this too before it returns: the winner may still be
        // on its way to the fronts, and this caller's next call must be refused however they interleave.
        val first = if (won) reason else aborted.get()!!
        for (c in communicators) c.abortWith(first, LocalBackend.FROM_GROUP)
        if (!won) return false
        failPending(failure, backends[0].abortedBy(reason), timedOut)
        return true
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
     * or this group aborted; the caller then tries [slotFor] again. Woken by the recycle itself.
     */
    suspend fun awaitSlotFor(seq: Long) {
        val s = ring.get(((seq - 1) % RING).toInt()) ?: return
        s.awaitGeneration(seq) { abortCause != null }
    }

    /** Fails every pending slot and receive of this group ([abort]); wakes the ranks waiting for a slot. */
    private fun failPending(specific: OperationFailure?, generic: OperationFailure, timedOut: Any?) {
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
            world.close(backends[rank].closeFailure("every rank closed its communicator"))
            return
        }
        // Somebody already waiting for this rank can never finish: abort rather than let them time out.
        for (i in 0 until RING) {
            val s = ring.get(i) ?: continue
            if (s.state.get() == OpSlot.PENDING && s.arrived.get() > 0 && !s.present[rank]) {
                abort(
                    backends[rank].closeFailure("rank $rank of $description closed its communicator while other ranks waited for it in ${OpKind.name(s.kinds.firstPresent(s))}"),
                )
                return
            }
        }
        if (mailboxes[rank].hasWaitingSend()) {
            abort(
                backends[rank].closeFailure("rank $rank of $description closed its communicator while a send to it waited for its receive"),
            )
            return
        }
        for (m in mailboxes) if (m.hasWaiterFor(rank)) {
            abort(
                backends[rank].closeFailure("rank $rank of $description closed its communicator while rank ${m.owner} waited to receive from it"),
            )
            return
        }
    }

    private fun IntArray.firstPresent(s: OpSlot): Int {
        for (r in 0 until size) if (s.present[r]) return this[r]
        return this[0]
    }

    /** True while [markAllClosed] closes every rank's communicator (the world closes: no rank's close aborts the others). */
    @Volatile var closingAll: Boolean = false
        private set

    /** Closes every rank's communicator of this group, as the world closes. */
    fun markAllClosed() {
        closingAll = true
        for (c in communicators) c.close()
    }

    /**
     * Rank [rank]'s collective [seq] (its flight record [recorderSeq], [name]) passed its deadline
     * (the front's, from its call): aborts this group with a [dev.tpcomm.CommunicationTimeoutException]
     * naming the ranks that never arrived, which every waiting rank gets. [slot] is where the rank
     * arrived, or null when it still waits for the ring position (more than [RING] collectives
     * ahead of the slowest rank). A slot whose data movement already runs is left to finish.
     */
    fun collectiveTimedOut(rank: Int, seq: Long, recorderSeq: Long, name: String, slot: OpSlot?) {
        // split and group are timed against the creation deadline (CommunicatorFront's creationTimeout).
        val creating = name == dev.tpcomm.spi.CollectiveOp.Split.apiName || name == dev.tpcomm.spi.CollectiveOp.Group.apiName
        val timeout = if (creating) "${world.config.effectiveCreationTimeout} (CommConfig.creationTimeout)" else "${world.config.timeout}"
        if (slot == null) {
            val older = ring.get(((seq - 1) % RING).toInt())
            val behind = if (older == null) emptyList() else (0 until size).filter { !older.present[it] }
            val msg = "$name timed out after $timeout: rank $rank of $description could not issue collective #$seq, $RING collectives " +
                "ahead of rank(s) $behind, which never arrived at collective #${seq - RING}"
            timedOut(rank, name, recorderSeq, msg, null)
            return
        }
        if (slot.state.get() != OpSlot.PENDING) return
        val waiting = (0 until size).filter { slot.present[it] }
        val missing = (0 until size).filter { !slot.present[it] }
        if (missing.isEmpty()) return
        val msg = "$name timed out after $timeout: rank(s) $missing of $description never arrived; rank(s) $waiting waited"
        timedOut(rank, name, recorderSeq, msg, slot)
    }

    /**
     * Rank [rank]'s point-to-point call recorded as [recorderSeq] passed its deadline: a posted
     * receive or probe names the message it waited for; a send above the eager limit names every
     * send still waiting for its receive (the rest of a cycle of sends, started a little later) and
     * the limit. Aborts this group; a call that finished meanwhile is left alone.
     */
    fun pointToPointTimedOut(rank: Int, recorderSeq: Long) {
        mailboxes[rank].postedReceive(recorderSeq)?.let { late ->
            val from = backends[rank].peerName(late.source)
            val tag = if (late.tag == dev.tpcomm.Communicator.ANY_TAG) "any tag" else "tag ${late.tag}"
            val msg = "${late.operation} timed out after ${world.config.timeout}: rank $rank of $description waited for a message from $from with $tag"
            timedOut(rank, late.operation, recorderSeq, msg, late)
            return
        }
        val late = mailboxes.flatMap { box -> box.waitingSends().map { box.owner to it } }
        val (dst, first) = late.firstOrNull { (_, m) -> m.source == rank && m.recorderSeq == recorderSeq } ?: return
        val pairs = late.joinToString(", ") { (to, m) -> "${m.source}->$to" }
        val msg = "send timed out after ${world.config.timeout}: rank(s) ${late.map { it.second.source }.distinct().sorted()} of $description " +
            "waited for their receivers to post a matching receive (sender->receiver: $pairs). " + mailboxes[dst].rendezvousAdvice(first.byteSize, dst)
        timedOut(rank, first.operation, recorderSeq, msg, late.map { it.second })
    }

    /** Aborts this group with the timeout [msg] of [rank]'s [operation]; [what] (a slot, a receive, sends) fails with it, the rest as aborted. */
    private fun timedOut(rank: Int, operation: String, recorderSeq: Long, msg: String, what: Any?) {
        val reason = communicators[rank].exceptionOf(OperationFailure(OperationFailure.TIMEOUT, msg), operation, recorderSeq)
        abort(reason, OperationFailure(OperationFailure.TIMEOUT, msg, reason), what)
    }

    companion object {
        /** Ring size: how many collectives one rank may issue ahead of the slowest before waiting for a slot. */
        const val RING = 256
    }
}
