package dev.tpcomm.coroutines.local

import dev.tpcomm.Communicator
import dev.tpcomm.MessageInfo
import dev.tpcomm.Tensor
import kotlinx.coroutines.CancellableContinuation
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import kotlin.coroutines.resumeWithException

/**
 * Point-to-point messages addressed to rank [owner] of a group.
 *
 * Sends are buffered: a send copies straight into a matching receive already posted (no staging
 * copy), and otherwise into a private buffer queued here, and returns at once. Receives take the
 * first queued message that matches (source or ANY_SOURCE, tag or ANY_TAG), so messages of one
 * (source, tag) pair arrive in the order sent; without one they post themselves and suspend.
 * A message whose size differs from the receive buffer's is not consumed: the receive fails with
 * IllegalArgumentException and the message stays queued. All state is guarded by [lock].
 */
internal class Mailbox(private val group: LocalGroup, val owner: Int) {
    private val lock = Any()
    private val queue = ArrayDeque<Message>()
    private val posted = ArrayList<Posted>()

    class Message(val source: Int, val tag: Int, val byteSize: Long, val data: MemorySegment)

    class Posted(
        val source: Int,
        val tag: Int,
        val target: Tensor?, // null for probe
        val cont: CancellableContinuation<MessageInfo>,
        val operation: String,
        val recorderSeq: Long,
        val startNanos: Long,
    )

    private fun matches(src: Int, tag: Int, msgSource: Int, msgTag: Int): Boolean =
        (src == Communicator.ANY_SOURCE || src == msgSource) && (tag == Communicator.ANY_TAG || tag == msgTag)

    /**
     * Returns once no [deliver] is copying into a receive that was cancelled before this call: a
     * cancelled receive is skipped by every later delivery, and one in progress holds [lock].
     */
    fun quiesce() {
        synchronized(lock) { }
    }

    /** Delivers a message from [source]. Never suspends. */
    fun deliver(source: Int, tag: Int, data: MemorySegment) {
        val bytes = data.byteSize()
        var wake: ArrayList<Pair<Posted, Result<MessageInfo>>>? = null
        synchronized(lock) {
            val info = MessageInfo(source, tag, bytes)
            var consumed = false
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
                    val err = IllegalArgumentException(
                        "${p.operation}: the receive buffer ${p.target.dtype}${p.target.shape} has ${p.target.byteSize} bytes but the message " +
                            "from rank $source (tag $tag) has $bytes; probe() first to learn the size. The message was not consumed.",
                    )
                    (wake ?: ArrayList<Pair<Posted, Result<MessageInfo>>>().also { w -> wake = w }).add(p to Result.failure(err))
                    continue
                }
                it.remove()
                MemorySegment.copy(data, 0, p.target.segment, 0, bytes)
                (wake ?: ArrayList<Pair<Posted, Result<MessageInfo>>>().also { w -> wake = w }).add(p to Result.success(info))
                consumed = true
                break
            }
            if (!consumed) {
                val copy = allocate(bytes)
                MemorySegment.copy(data, 0, copy, 0, bytes)
                queue.addLast(Message(source, tag, bytes, copy))
            }
        }
        wake?.forEach { (p, r) -> p.cont.resumeWith(r) }
    }

    private fun allocate(bytes: Long): MemorySegment =
        if (bytes <= HEAP_LIMIT) MemorySegment.ofArray(LongArray(((bytes + 7) / 8).toInt())).asSlice(0, bytes)
        else Arena.ofAuto().allocate(bytes, 64)

    /**
     * Takes the first matching queued message into [target] (or, for a probe with null target,
     * only reports it). Returns null when none is queued.
     */
    fun tryTake(src: Int, tag: Int, target: Tensor?, operation: String): MessageInfo? = synchronized(lock) {
        takeLocked(src, tag, target, operation)
    }

    private fun takeLocked(src: Int, tag: Int, target: Tensor?, operation: String): MessageInfo? {
        val it = queue.iterator()
        while (it.hasNext()) {
            val m = it.next()
            if (!matches(src, tag, m.source, m.tag)) continue
            if (target != null) {
                require(target.byteSize == m.byteSize) {
                    "$operation: the receive buffer ${target.dtype}${target.shape} has ${target.byteSize} bytes but the message from rank " +
                        "${m.source} (tag ${m.tag}) has ${m.byteSize}; probe() first to learn the size. The message was not consumed."
                }
                MemorySegment.copy(m.data, 0, target.segment, 0, m.byteSize)
                it.remove()
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
        synchronized(lock) {
            val cause = group.world.abortCause
            if (cause != null) {
                immediate = Result.failure(group.communicators[owner].abortedException(operation, recorderSeq, cause))
            } else {
                try {
                    val info = takeLocked(src, tag, target, operation)
                    if (info != null) {
                        immediate = Result.success(info)
                    } else {
                        val p = Posted(src, tag, target, cont, operation, recorderSeq, System.nanoTime())
                        posted.add(p)
                        cont.invokeOnCancellation { synchronized(lock) { posted.remove(p) } }
                    }
                } catch (e: IllegalArgumentException) {
                    immediate = Result.failure(e)
                }
            }
        }
        immediate?.let { cont.resumeWith(it) }
    }

    fun hasWaiterFor(rank: Int): Boolean = synchronized(lock) { posted.any { it.source == rank } }

    fun failAll(generic: SlotFailure, timedOut: Any?, specific: SlotFailure?) {
        val failed = synchronized(lock) { ArrayList(posted).also { posted.clear() } }
        val comm = group.communicators[owner]
        for (p in failed) {
            val f = if (specific != null && p === timedOut) specific else generic
            p.cont.resumeWithException(comm.failureException(f, p.operation, p.recorderSeq))
        }
    }

    /** Aborts the world when a posted receive passed its deadline; returns true if it did. */
    fun checkTimeout(now: Long, timeoutNanos: Long): Boolean {
        val late = synchronized(lock) { posted.firstOrNull { now - it.startNanos > timeoutNanos } } ?: return false
        val from = if (late.source == Communicator.ANY_SOURCE) "any rank" else "rank ${late.source}"
        val tag = if (late.tag == Communicator.ANY_TAG) "any tag" else "tag ${late.tag}"
        val msg = "${late.operation} timed out after ${group.world.config.timeout}: rank $owner of ${group.description} waited for a message from $from with $tag"
        val comm = group.communicators[owner]
        val reason = comm.errors.timeout(late.operation, late.recorderSeq, msg)
        return group.world.abort(reason, SlotFailure(SlotFailure.TIMEOUT, msg, reason), late)
    }

    private companion object {
        const val HEAP_LIMIT = 1L shl 20
    }
}
