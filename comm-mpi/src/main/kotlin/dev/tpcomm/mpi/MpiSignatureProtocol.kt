package dev.tpcomm.mpi

import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.spi.CollectiveOp
import dev.tpcomm.spi.CollectiveSignature
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout

/**
 * The consistency check of one [MpiCommunicator] (`CommConfig.checkConsistency`, on by default)
 * over the core's one signature encoding ([CollectiveSignature]). Before each collective every rank
 * loads what the front encoded for its call ([load]) and the communicator all-reduces with MAX the 16-byte
 * digest pair [digestSend] (`[h, h.inv()]`, [CollectiveSignature.digest]) into [digestReceived]:
 * when [digestsAgree], the collective goes ahead. Otherwise every rank knows it (see
 * [CollectiveSignature.digest]), all-gathers the full signatures ([send] into [received]) and the
 * front compares [all] of them, naming the ranks and fields that differ from rank 0's. The buffers live in [arena]
 * (native, allocated once).
 */
internal class MpiSignatureProtocol(private val worldSize: Int, arena: Arena, val description: String) {
    /** This rank's signature, as sent. */
    val send: MemorySegment = arena.allocate(8L * SIG_LEN, 64)

    /** Every rank's signature after the all-gather, rank order. */
    val received: MemorySegment = arena.allocate(8L * SIG_LEN * worldSize, 64)

    /** This rank's digest pair `[h, h.inv()]`, as sent to the MAX all-reduce. */
    val digestSend: MemorySegment = arena.allocate(16, 64)

    /** The element-wise MAX of every rank's digest pair. */
    val digestReceived: MemorySegment = arena.allocate(16, 64)

    /** Copies [sig] into [send] and its digest pair into [digestSend]. */
    fun load(sig: LongArray) {
        MemorySegment.copy(sig, 0, send, ValueLayout.JAVA_LONG, 0, SIG_LEN)
        val h = CollectiveSignature.digest(sig)
        digestSend.set(ValueLayout.JAVA_LONG, 0, h)
        digestSend.set(ValueLayout.JAVA_LONG, 8, h.inv())
    }

    /** True when the MAX of every rank's digest pair is this rank's own: every rank called the same. */
    fun digestsAgree(): Boolean =
        digestReceived.get(ValueLayout.JAVA_LONG, 0) == digestSend.get(ValueLayout.JAVA_LONG, 0) &&
            digestReceived.get(ValueLayout.JAVA_LONG, 8) == digestSend.get(ValueLayout.JAVA_LONG, 8)

    /** Every rank's signature, as [received] holds them after the all-gather. */
    fun all(): LongArray = LongArray(SIG_LEN * worldSize) { received.getAtIndex(ValueLayout.JAVA_LONG, it.toLong()) }

    companion object {
        const val SIG_LEN: Int = CollectiveSignature.SIZE
    }
}
