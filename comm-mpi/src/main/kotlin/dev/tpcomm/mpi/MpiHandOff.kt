package dev.tpcomm.mpi

import dev.tpcomm.Tensor
import dev.tpcomm.engine.CommunicatorFront
import dev.tpcomm.engine.OperationCall
import kotlinx.coroutines.CancellableContinuation
import java.util.concurrent.atomic.AtomicInteger

/**
 * One call handed from its caller to an MPI communicator's thread: where it is in that hand-off,
 * and the tensors the front retained for it.
 *
 * **The front's one retain.** The caller hands the front's retained tensors over
 * ([CommunicatorFront.handOverTensors]) before its call goes to the communicator's thread, because
 * the caller may be released (its `withTimeout`, a cancellation, its deadline) while MPI still
 * reads or writes them. They are released ([CommunicatorFront.releaseHandedOver] for collective
 * [call], [Tensor.release] for a message's [tensor]) once both sides let go: the caller when its
 * call returns ([callerLeft]), and MPI when it is done with them ([mpiDone]: a blocking call
 * returned, a non-blocking one completed, or nothing was started). MPI never lets go of an
 * operation that failed while it may still touch the buffers, so those stay retained for the life
 * of the process.
 *
 * **The queue.** A block queued for the thread [start]s there, unless its caller gave it up first
 * ([abandon]: cancelled while queued, or released at its deadline with [release]); exactly one of
 * the two wins. [queued] is the waiting caller, resumed by [release] from the front's deadline
 * (the watchdog's thread), whatever holds the communicator's thread.
 *
 * Thread-safe.
 */
internal class MpiHandOff(
    private val front: CommunicatorFront?,
    private val call: OperationCall?,
    private val tensor: Tensor?,
) {
    /** [CALLER] and [MPI] once each side let go of the tensors. */
    private val leftSides = AtomicInteger(0)

    /** [QUEUED], then [STARTED] or [ABANDONED]. */
    private val place = AtomicInteger(QUEUED)

    /** The caller waiting for the queued block ([waitWith]). */
    @Volatile private var queued: CancellableContinuation<*>? = null

    /** The caller's side let go (its call returned, or it was released). */
    fun callerLeft() = leave(CALLER)

    /** MPI is done with the tensors (or never got them). Never for an operation MPI may still touch. */
    fun mpiDone() = leave(MPI)

    private fun leave(side: Int) {
        val before = leftSides.getAndUpdate { it or side }
        if (before and side == 0 && before or side == BOTH) {
            if (call != null) front!!.releaseHandedOver(call) else tensor?.release()
        }
    }

    /** The queued block starts on the communicator's thread: false when its caller gave it up first. */
    fun start(): Boolean = place.compareAndSet(QUEUED, STARTED)

    /** The caller gives up its queued block: true when the block had not started (it never will). */
    fun abandon(): Boolean = place.compareAndSet(QUEUED, ABANDONED)

    /**
     * The call's deadline passed ([timeout]): a caller still queued is released with it, its block
     * never starts and MPI never holds its tensors. A started call is the job policy's.
     */
    fun release(timeout: Throwable) {
        releasedWith = timeout
        if (!abandon()) return
        mpiDone()
        queued?.cancel(timeout)
    }

    /** [release]'s timeout, once it gave the block up. */
    @Volatile private var releasedWith: Throwable? = null

    /**
     * Sets the waiting caller [cont] (before its block is queued), and releases it at once when the
     * deadline gave the block up before it was set ([release] may run before the caller suspends).
     */
    fun waitWith(cont: CancellableContinuation<*>) {
        queued = cont
        if (place.get() == ABANDONED) releasedWith?.let { cont.cancel(it) }
    }

    private companion object {
        const val CALLER = 1
        const val MPI = 2
        const val BOTH = CALLER or MPI
        const val QUEUED = 0
        const val STARTED = 1
        const val ABANDONED = 2
    }
}
