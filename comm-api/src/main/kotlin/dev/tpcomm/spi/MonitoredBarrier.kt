package dev.tpcomm.spi

import dev.tpcomm.CommunicationException
import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.InternalTpcommApi
import dev.tpcomm.MonitoredBarrierException
import dev.tpcomm.Tensor
import kotlinx.coroutines.CancellationException
import kotlinx.coroutines.CoroutineStart
import kotlinx.coroutines.Job
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.channels.Channel
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.launch
import kotlinx.coroutines.withTimeoutOrNull
import kotlin.time.Duration
import kotlin.time.TimeSource
import java.util.concurrent.atomic.AtomicReferenceArray

/**
 * [Communicator.monitoredBarrier] on every backend, over the backend's [MonitoredBarrierChannel]:
 * PyTorch's `ProcessGroupGloo::monitoredBarrier` (pytorch/pytorch
 * `torch/csrc/distributed/c10d/ProcessGroupGloo.cpp`), whose protocol this follows. Every rank but
 * 0 sends a token (its rank) to rank 0 and waits for rank 0's answer; rank 0 receives from every
 * other rank until the timeout, collects the ranks it did not hear from, and answers: "pass" to
 * everyone when all arrived (a true barrier: all ranks leave it or none does), otherwise the list of
 * missing ranks to the ranks that arrived, and it throws a [MonitoredBarrierException] naming them
 * (the first one, or all of them with `waitAllRanks`, as PyTorch's `wait_all_ranks`).
 *
 * **Differences from PyTorch, and why.** PyTorch waits for each rank in turn (with `wait_all_ranks`
 * each with the full timeout, so a call may take `worldSize - 1` timeouts); here rank 0 waits for
 * all ranks at once, within one timeout, where the backend lets receives wait concurrently
 * ([MonitoredBarrierChannel.concurrentReceives]). PyTorch's other ranks wait for the answer with the
 * process group's timeout and then report only that they failed; here they wait twice the timeout
 * (rank 0's wait, plus up to one timeout by which rank 0 may have been late) and learn the missing
 * ranks from rank 0, so every rank in the barrier ends within twice the timeout with the same list.
 * A failure aborts the communicator (tpcomm's rule for a rank that never arrives): no late token can
 * then be taken for a later barrier's, and receives the backend cannot withdraw (MPI, NCCL) are
 * abandoned safely.
 */
@InternalTpcommApi
public object MonitoredBarrier {
    /** The operation's name in flight records and exceptions. */
    public const val OPERATION: String = "monitoredBarrier"

    /** Rank 0's answer when every rank arrived. A failure is `-(k + 1)` followed by the k missing ranks. */
    private const val PASS: Long = 0L

    /** Runs the barrier on [comm] over [channel]. See [Communicator.monitoredBarrier]. */
    public suspend fun run(comm: Communicator, channel: MonitoredBarrierChannel, timeout: Duration, waitAllRanks: Boolean) {
        checkTimeout(timeout, channel)
        channel.ensureUsable()
        if (comm.worldSize == 1) return
        if (comm.rank == 0) root(comm, channel, timeout, waitAllRanks) else member(comm.rank, channel, timeout)
    }

    /**
     * Refuses a [timeout] the barrier cannot keep ([IllegalArgumentException] saying what to pass):
     * not positive and finite, or not under half of [channel]'s call timeout (the ranks that arrive
     * wait up to twice it for rank 0's answer). Nothing is sent.
     */
    public fun checkTimeout(timeout: Duration, channel: MonitoredBarrierChannel) {
        require(timeout.isPositive() && timeout.isFinite()) {
            "$OPERATION: timeout $timeout must be positive and finite; pass how long rank 0 waits for the other ranks, e.g. 30.seconds"
        }
        channel.callTimeout?.let { limit ->
            require(timeout * 2 < limit) {
                "$OPERATION: timeout $timeout must be under half the communicator's timeout ($limit): the ranks that arrive wait up to " +
                    "twice the timeout for rank 0's answer, and the communicator's deadline would end that wait first; pass a shorter " +
                    "timeout, or create the communicator with a longer CommConfig.timeout"
            }
        }
    }

    /** The tag of [taggedChannel]'s messages: the largest tag every MPI library accepts (`MPI_TAG_UB` is at least 32767). */
    public const val FALLBACK_TAG: Int = 32767

    /**
     * The channel of a backend that supplies none (a third-party [Communicator] that does not override
     * [Communicator.monitoredBarrier]): one-element `Int64` host tensors through [comm]'s own [Communicator.send]
     * and [Communicator.recv] on [FALLBACK_TAG], which the program must then not use, nor receive with
     * `ANY_TAG` while a monitored barrier runs. It cannot abort the communicator (after a failure, do not use it),
     * nor tell whether it is usable (the first message says so).
     */
    public fun taggedChannel(comm: Communicator): MonitoredBarrierChannel = object : MonitoredBarrierChannel {
        override val errors: CommunicationErrors = CommunicationErrors(comm.rank, comm.backendName)
        override val concurrentReceives: Boolean get() = true

        override suspend fun send(value: Long, dst: Int) {
            comm.send(Tensor.of(longArrayOf(value)), dst, FALLBACK_TAG)
        }

        override suspend fun recv(src: Int): Long {
            val t = Tensor.zeros(DType.Int64, 1)
            comm.recv(t, src, FALLBACK_TAG)
            return t.getLong(0)
        }

        override fun ensureUsable() {}

        override fun abort(cause: CommunicationException) {}
    }

    private fun ranks(missing: List<Int>): String = if (missing.size == 1) "rank ${missing[0]}" else "ranks $missing"

    private suspend fun root(comm: Communicator, ch: MonitoredBarrierChannel, timeout: Duration, waitAllRanks: Boolean): Unit = coroutineScope {
        val n = comm.worldSize
        val deadline = TimeSource.Monotonic.markNow() + timeout
        val tokens = arrayOfNulls<Job>(n)
        // Each receive's outcome, set when it ends (before the job itself is complete), and one element
        // per receive that ended: whether it failed.
        val results = AtomicReferenceArray<Result<Long>?>(n)
        val finished = Channel<Boolean>(Channel.UNLIMITED)
        fun start(r: Int): Job = launch(start = CoroutineStart.UNDISPATCHED) {
            val res = runCatching { ch.recv(r) }
            results.set(r, res)
            finished.trySend(res.isFailure)
        }.also { tokens[r] = it }
        if (ch.concurrentReceives) {
            for (r in 1 until n) start(r)
            // Until every rank answered, one receive failed (no point waiting for the others), or the deadline.
            withTimeoutOrNull(timeout) {
                repeat(n - 1) { if (finished.receive()) return@withTimeoutOrNull }
            }
        } else {
            for (r in 1 until n) {
                val left = -deadline.elapsedNow()
                if (!left.isPositive()) break
                val d = start(r)
                withTimeoutOrNull(left) { d.join() }
                if (results.get(r)?.isSuccess != true) break
            }
        }

        val arrived = ArrayList<Int>()
        val missing = ArrayList<Int>()
        val unchecked = ArrayList<Int>()
        // A receive that failed (the rank closed its communicator, sent something else, the communicator
        // failed meanwhile) also names its rank, with the failure as the cause, as PyTorch does.
        var failedRank = -1
        var failure: Throwable? = null
        for (r in 1 until n) {
            val res = results.get(r)
            when {
                tokens[r] == null -> unchecked += r
                res == null -> missing += r
                else -> {
                    val v = res.getOrNull()
                    when {
                        v == r.toLong() -> arrived += r
                        failure != null -> missing += r
                        v == null -> { failedRank = r; failure = res.exceptionOrNull() }
                        else -> {
                            failedRank = r
                            failure = ch.errors.failure(
                                OPERATION, CommunicationErrors.NO_SEQUENCE,
                                "rank $r sent $v where its monitoredBarrier token ($r) was expected; every rank must call monitoredBarrier " +
                                    "at this point of its program (a rank called another operation, or runs another version)",
                            )
                        }
                    }
                }
            }
        }
        failure?.let { if (it is CancellationException || it !is CommunicationException) throw it }

        if (failure == null && missing.isEmpty() && unchecked.isEmpty()) {
            if (ch.concurrentReceives) {
                (1 until n).map { r -> async(start = CoroutineStart.UNDISPATCHED) { ch.send(PASS, r) } }.awaitAll()
            } else {
                for (r in 1 until n) ch.send(PASS, r)
            }
            return@coroutineScope
        }

        val e = if (failure != null) {
            ch.errors.monitoredBarrier(
                OPERATION, CommunicationErrors.NO_SEQUENCE,
                "rank $failedRank did not reach $OPERATION: receiving its token failed (${failure.message})", listOf(failedRank), failure,
            )
        } else {
            val named = if (waitAllRanks) missing.toList() else missing.take(1)
            ch.errors.monitoredBarrier(OPERATION, CommunicationErrors.NO_SEQUENCE, rootMessage(named, missing, unchecked, timeout), named)
        }
        val named = e.missingRanks
        // Tell the ranks that arrived (where a receive still waiting does not block the channel), then abort.
        if (ch.concurrentReceives) {
            withTimeoutOrNull(timeout) {
                arrived.map { r ->
                    async(start = CoroutineStart.UNDISPATCHED) {
                        runCatching {
                            ch.send(-(named.size + 1).toLong(), r)
                            for (m in named) ch.send(m.toLong(), r)
                        }
                    }
                }.awaitAll()
            }
        }
        ch.abort(e)
        for (d in tokens) d?.cancel()
        for (d in tokens) d?.join()
        throw e
    }

    private fun rootMessage(named: List<Int>, missing: List<Int>, unchecked: List<Int>, timeout: Duration): String = buildString {
        append("${ranks(named)} did not reach $OPERATION within $timeout")
        val more = missing.size - named.size
        if (more > 0) append(" ($more more rank${if (more == 1) "" else "s"} did not either; waitAllRanks = true names them all)")
        if (unchecked.isNotEmpty()) {
            append(
                " (${ranks(unchecked)} not checked: this backend receives from one rank at a time, in rank order, " +
                    "and a missing rank ends the wait)",
            )
        }
    }

    private suspend fun member(rank: Int, ch: MonitoredBarrierChannel, timeout: Duration): Unit = coroutineScope {
        val work = async(start = CoroutineStart.UNDISPATCHED) {
            runCatching {
                ch.send(rank.toLong(), 0)
                answer(ch)
            }
        }
        val wait = timeout * 2
        val outcome = withTimeoutOrNull(wait) { work.await() }
        if (outcome == null) {
            val e = ch.errors.monitoredBarrier(
                OPERATION, CommunicationErrors.NO_SEQUENCE,
                "rank 0 did not answer $OPERATION within $wait (twice the timeout): rank 0 did not reach it, " +
                    "or it found ranks missing and could not tell rank $rank (rank 0's exception names them)",
                listOf(0),
            )
            ch.abort(e)
            work.cancel()
            work.join()
            throw e
        }
        val missing = outcome.getOrElse { t -> throw memberFailure(rank, ch, timeout, t) } ?: return@coroutineScope
        val e = if (missing.isEmpty()) {
            ch.errors.monitoredBarrier(
                OPERATION, CommunicationErrors.NO_SEQUENCE,
                "rank 0 failed in $OPERATION for another reason than a missing rank (rank 0's exception says why)", missing,
            )
        } else {
            ch.errors.monitoredBarrier(OPERATION, CommunicationErrors.NO_SEQUENCE, "${ranks(missing)} did not reach $OPERATION within $timeout (reported by rank 0)", missing)
        }
        ch.abort(e)
        throw e
    }

    /** Rank 0's answer: null for pass, else the missing ranks it names (empty: it failed otherwise). */
    private suspend fun answer(ch: MonitoredBarrierChannel): List<Int>? {
        val v = ch.recv(0)
        if (v == PASS) return null
        val k = -v - 1
        if (k < 0 || k > Int.MAX_VALUE) {
            throw ch.errors.failure(
                OPERATION, CommunicationErrors.NO_SEQUENCE,
                "rank 0 answered $v, which is no monitoredBarrier answer; every rank must call monitoredBarrier at this point of its program",
            )
        }
        return List(k.toInt()) { ch.recv(0).toInt() }
    }

    /** The exception of a rank whose send or wait for rank 0's answer failed with [t]. */
    private fun memberFailure(rank: Int, ch: MonitoredBarrierChannel, timeout: Duration, t: Throwable): Throwable {
        if (t is CancellationException || t !is CommunicationException) return t
        // The local backend's abort carries rank 0's exception as the cause of every later failure.
        val reported = generateSequence(t as Throwable) { it.cause }.take(16).filterIsInstance<MonitoredBarrierException>().firstOrNull()
        val e = if (reported != null && reported.missingRanks.isNotEmpty()) {
            ch.errors.monitoredBarrier(
                OPERATION, CommunicationErrors.NO_SEQUENCE,
                "${ranks(reported.missingRanks)} did not reach $OPERATION within $timeout (reported by rank ${reported.rank})", reported.missingRanks, t,
            )
        } else {
            ch.errors.monitoredBarrier(
                OPERATION, CommunicationErrors.NO_SEQUENCE,
                "rank $rank reached $OPERATION but failed while waiting for rank 0's answer (${t.message}); rank 0's exception names the ranks that did not arrive",
                emptyList(), t,
            )
        }
        ch.abort(e)
        return e
    }
}
