package dev.tpcomm.coroutines.local

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.MessageInfo
import dev.tpcomm.Tensor
import dev.tpcomm.engine.OperationFailedSignal
import dev.tpcomm.engine.OperationFailure
import kotlinx.coroutines.CancellableContinuation
import java.lang.foreign.MemorySegment
import kotlin.coroutines.resumeWithException

/**
 * Point-to-point messages addressed to rank [owner] of a group.
 *
 * A send of at most the world's eager limit (`local.eagerLimit`, [LocalBackendFactory.DEFAULT_EAGER_LIMIT]
 * by default), or any send to the same rank, is buffered: it copies straight into a matching
 * receive already posted (no staging copy), and otherwise into a private buffer queued here, and
 * returns at once. A larger send to another rank is a rendezvous, as MPI's is above its eager limit: it copies straight into a matching posted receive,
 * or queues its own memory and waits ([park]) until a receive takes it. Receives take the first
 * queued message that matches (source or ANY_SOURCE, tag or ANY_TAG), buffered or waiting, so
 * messages of one (source, tag) pair arrive in the order sent; without one they post themselves and
 * suspend. A message whose size differs from the receive buffer's is not consumed: the receive fails
 * with a plain `CommunicationException` saying both sizes (as on the MPI backend, worded the same)
 * and the message stays queued. All state is guarded by [lock].
 */
internal class Mailbox(private val group: LocalGroup, val owner: Int) {
    private val lock = Any()
    private val queue = ArrayDeque<Message>()
    private val posted = ArrayList<Posted>()

    /**
     * A queued message. A buffered one owns [data] (in [buffer] above [HEAP_LIMIT], which whoever
     * takes it off the queue closes); a waiting (rendezvous) one points at the sender's memory and
     * resumes [sender] when a receive has copied it.
     */
    class Message(val source: Int, val tag: Int, val byteSize: Long, val data: MemorySegment, val buffer: Tensor? = null) {
        var sender: CancellableContinuation<Unit>? = null
        var operation: String = ""
        var recorderSeq: Long = 0
    }

    class Posted(
        val source: Int,
        val tag: Int,
        val target: Tensor?, // null for probe
        val cont: CancellableContinuation<MessageInfo>,
        val operation: String,
        val recorderSeq: Long,
    )

    /** `ANY_TAG` matches user tags (>= 0) only, never the library's negative ones ([LocalBackend.CONTROL_TAG]). */
    private fun matches(src: Int, tag: Int, msgSource: Int, msgTag: Int): Boolean =
        (src == Communicator.ANY_SOURCE || src == msgSource) && (if (tag == Communicator.ANY_TAG) msgTag >= 0 else tag == msgTag)

    /**
     * Returns once no [deliver] is copying into a receive that was cancelled before this call: a
     * cancelled receive is skipped by every later delivery, and one in progress holds [lock].
     */
    fun quiesce() {
        synchronized(lock) { }
    }

    /** Delivers a buffered message from [source]: copies it into a posted receive or queues a copy. Never suspends. */
    fun deliver(source: Int, tag: Int, data: MemorySegment) {
        offer(source, tag, data, null)
    }

    /**
     * The rendezvous send: copies [data] into a matching posted receive and resumes [cont] at once,
     * or queues [data] itself (no copy) and resumes [cont] when a receive has taken it. Cancelling
     * [cont] withdraws a message no receive has taken yet; one being copied finishes first (under
     * [lock]), so the sender may release [data] once it has called [quiesce].
     */
    fun park(source: Int, tag: Int, data: MemorySegment, cont: CancellableContinuation<Unit>, operation: String, recorderSeq: Long) {
        val cause = group.abortCause
        if (cause != null) {
            cont.resumeWith(Result.failure(OperationFailedSignal(group.backends[source].abortedBy(cause))))
            return
        }
        offer(source, tag, data, cont, operation, recorderSeq)
    }

    private fun offer(
        source: Int,
        tag: Int,
        data: MemorySegment,
        sender: CancellableContinuation<Unit>?,
        operation: String = "",
        recorderSeq: Long = 0,
    ) {
        val bytes = data.byteSize()
        var wake: ArrayList<Pair<Posted, Result<MessageInfo>>>? = null
        var consumed = false
        synchronized(lock) {
            // A message no posted receive will take is copied: its memory first, before any posted call
            // is answered, so that running out of budget (NativeMemoryBudgetException to the sender)
            // leaves every receive and probe as it was.
            val copy = if (sender == null && !receivable(source, tag, bytes)) bufferCopy(data, bytes) else null
            val info = MessageInfo(source, tag, bytes)
            val it = posted.iterator()
            while (it.hasNext()) {
                val p = it.next()
                if (!p.cont.isActive) { it.remove(); continue } // cancelled receive: never consume for it
                if (!matches(p.source, p.tag, source, tag)) continue
                if (p.target == null) {
                    it.remove()
                    (wake ?: ArrayList<Pair<Posted, Result<MessageInfo>>>().also { w -> wake = w }).add(p to Result.success(info))
                    continue
                }
                if (p.target.byteSize != bytes) {
                    it.remove()
                    val err = wrongSize(p.target, source, tag, bytes)
                    (wake ?: ArrayList<Pair<Posted, Result<MessageInfo>>>().also { w -> wake = w }).add(p to Result.failure(err))
                    continue
                }
                it.remove()
                MemorySegment.copy(data, 0, p.target.segment, 0, bytes)
                (wake ?: ArrayList<Pair<Posted, Result<MessageInfo>>>().also { w -> wake = w }).add(p to Result.success(info))
                consumed = true
                break
            }
            if (!consumed && sender == null) {
                val (segment, buffer) = copy ?: bufferCopy(data, bytes)
                queue.addLast(Message(source, tag, bytes, segment, buffer))
            } else if (!consumed && sender != null) {
                val m = Message(source, tag, bytes, data)
                m.sender = sender
                m.operation = operation
                m.recorderSeq = recorderSeq
                queue.addLast(m)
                sender.invokeOnCancellation { synchronized(lock) { queue.remove(m) } }
            }
        }
        wake?.forEach { (p, r) -> p.cont.resumeWith(r) }
        if (consumed) sender?.resumeWith(Result.success(Unit))
    }

    /** Whether a receive posted here (active, matching, of [bytes]) takes a message now, as [offer]'s loop decides; under [lock]. */
    private fun receivable(source: Int, tag: Int, bytes: Long): Boolean =
        posted.any { p -> p.cont.isActive && matches(p.source, p.tag, source, tag) && p.target != null && p.target.byteSize == bytes }

    /**
     * A copy of [data] for the queue, and the tensor that holds it above [HEAP_LIMIT] (null: on the
     * Java heap). The tensor counts against the native memory budget (a loop of messages nobody
     * receives ends in [dev.tpcomm.NativeMemoryBudgetException] on the sender, named, instead of
     * growing the process) and goes back to the pool as soon as a receive took the message
     * ([Message.buffer]).
     */
    private fun bufferCopy(data: MemorySegment, bytes: Long): Pair<MemorySegment, Tensor?> {
        val buffer = if (bytes > HEAP_LIMIT) Tensor.zeros(DType.Int64, listOf(((bytes + 7) / 8).toInt())) else null
        val copy = buffer?.segment?.asSlice(0, bytes) ?: MemorySegment.ofArray(LongArray(((bytes + 7) / 8).toInt())).asSlice(0, bytes)
        MemorySegment.copy(data, 0, copy, 0, bytes)
        return copy to buffer
    }

    /**
     * Takes the first matching queued message into [target] (or, for a probe with null target,
     * only reports it). Returns null when none is queued.
     */
    fun tryTake(src: Int, tag: Int, target: Tensor?, operation: String): MessageInfo? {
        var taken: Message? = null
        val info = synchronized(lock) { takeLocked(src, tag, target) { taken = it } }
        taken?.sender?.resumeWith(Result.success(Unit))
        return info
    }

    /** Takes (or, for a probe, reports) the first matching queued message; [onTaken] gets a consumed one. */
    private inline fun takeLocked(src: Int, tag: Int, target: Tensor?, onTaken: (Message) -> Unit): MessageInfo? {
        val it = queue.iterator()
        while (it.hasNext()) {
            val m = it.next()
            if (!matches(src, tag, m.source, m.tag)) continue
            if (target != null) {
                if (target.byteSize != m.byteSize) throw wrongSize(target, m.source, m.tag, m.byteSize)
                MemorySegment.copy(m.data, 0, target.segment, 0, m.byteSize)
                it.remove()
                m.buffer?.close()
                onTaken(m)
            }
            return MessageInfo(m.source, m.tag, m.byteSize)
        }
        return null
    }

    /**
     * Second half of a receive or probe that found nothing: under the lock, takes a message that
     * arrived meanwhile or posts [cont] to be completed by a later [deliver].
     */
    fun postOrTake(src: Int, tag: Int, target: Tensor?, operation: String, recorderSeq: Long, cont: CancellableContinuation<MessageInfo>) {
        var immediate: Result<MessageInfo>? = null
        var taken: Message? = null
        synchronized(lock) {
            val cause = group.abortCause
            if (cause != null) {
                immediate = Result.failure(OperationFailedSignal(group.backends[owner].abortedBy(cause)))
            } else {
                try {
                    val info = takeLocked(src, tag, target) { taken = it }
                    if (info != null) {
                        immediate = Result.success(info)
                    } else {
                        val p = Posted(src, tag, target, cont, operation, recorderSeq)
                        posted.add(p)
                        cont.invokeOnCancellation { synchronized(lock) { posted.remove(p) } }
                    }
                } catch (e: OperationFailedSignal) {
                    immediate = Result.failure(e) // a queued message of another size
                }
            }
        }
        taken?.sender?.resumeWith(Result.success(Unit))
        immediate?.let { cont.resumeWith(it) }
    }

    /**
     * The refusal of a receive into [target] of a message from [source] with [tag] of [bytes] bytes
     * (another size): a plain `CommunicationException` worded as the MPI backend's, since neither
     * rank can see the mistake in its own arguments. The message stays queued.
     */
    private fun wrongSize(target: Tensor, source: Int, tag: Int, bytes: Long): OperationFailedSignal = OperationFailedSignal(
        OperationFailure(
            OperationFailure.OTHER,
            "the message from rank $source (tag $tag) has $bytes bytes but the receiving tensor (${target.dtype}${target.shape}) has " +
                "${target.byteSize} bytes; nothing was received and the message is still queued: receive it into a tensor of $bytes bytes " +
                "(probe tells the size)",
        ),
    )

    fun hasWaiterFor(rank: Int): Boolean = synchronized(lock) { posted.any { it.source == rank } }

    /** The sends (above the eager limit) waiting here for this mailbox's owner to receive them, oldest first. */
    fun waitingSends(): List<Message> = synchronized(lock) { queue.filter { it.sender != null } }

    /** The receive or probe posted here by the owner's call recorded as [recorderSeq], or null when it is no longer waiting. */
    fun postedReceive(recorderSeq: Long): Posted? = synchronized(lock) { posted.firstOrNull { it.recorderSeq == recorderSeq } }

    /** True when a send is waiting here for this mailbox's owner to receive it. */
    fun hasWaitingSend(): Boolean = synchronized(lock) { queue.any { it.sender != null } }

    fun failAll(generic: OperationFailure, timedOut: Any?, specific: OperationFailure?) {
        val failed = synchronized(lock) { ArrayList(posted).also { posted.clear() } }
        val senders = synchronized(lock) {
            val waiting = queue.filter { it.sender != null }
            queue.removeAll(waiting)
            // Nothing can receive on a failed communicator: buffered messages give their memory back now.
            val buffered = queue.filter { it.buffer != null }
            queue.removeAll(buffered)
            buffered.forEach { it.buffer!!.close() }
            waiting
        }
        for (p in failed) {
            val f = if (specific != null && p === timedOut) specific else generic
            p.cont.resumeWithException(OperationFailedSignal(f))
        }
        for (m in senders) {
            val f = if (specific != null && (timedOut as? Collection<*>)?.any { it === m } == true) specific else generic
            m.sender!!.resumeWithException(OperationFailedSignal(f))
        }
    }

    /** Why a send of [bytes] to [dst] waits, and what to change: named in every failure of a waiting send. */
    fun rendezvousAdvice(bytes: Long, dst: Int): String =
        "A send of $bytes bytes is above the eager limit of ${group.world.eagerLimit} bytes (option ${LocalBackendFactory.EAGER_LIMIT_OPTION}), " +
            "so, as MPI's rendezvous protocol does, it completes only when rank $dst posts a matching receive. " +
            "If every rank sends before it receives (a ring, an exchange), post the receive concurrently " +
            "(launch the send beside the recv) or order the calls so that one side receives first."

    private companion object {
        const val HEAP_LIMIT = 1L shl 20
    }
}
