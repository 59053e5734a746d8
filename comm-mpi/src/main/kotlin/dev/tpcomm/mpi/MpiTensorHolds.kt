package dev.tpcomm.mpi

import dev.tpcomm.Tensor
import java.util.concurrent.atomic.AtomicBoolean

/**
 * The caller's tensors of one MPI operation, retained ([Tensor.retain]) while MPI may read or
 * write them: a `close()` meanwhile (for example while an `allReduceAsync` is in flight) only
 * marks them closed, and their memory is freed at [release], when MPI is done. An operation that
 * fails while MPI may still touch its buffers is never released (its memory stays allocated for
 * the life of the process, as the communicator's pinned buffers do). [release] is idempotent and
 * thread-safe.
 */
internal class MpiTensorHolds private constructor(private val tensors: List<Tensor>) {
    private val released = AtomicBoolean(false)

    /** Ends the hold: tensors closed meanwhile are freed now. */
    fun release() {
        if (tensors.isEmpty() || !released.compareAndSet(false, true)) return
        for (t in tensors) t.release()
    }

    companion object {
        /** Holds nothing. */
        val NONE: MpiTensorHolds = MpiTensorHolds(emptyList())

        /**
         * Retains every tensor in [keepAlive] (a tensor, or an array of tensors and nulls).
         *
         * @throws IllegalArgumentException naming [operation] when one was closed (none is then held).
         */
        fun retain(keepAlive: Any?, operation: String): MpiTensorHolds {
            val all = when (keepAlive) {
                is Tensor -> listOf(keepAlive)
                is Array<*> -> keepAlive.filterIsInstance<Tensor>()
                else -> return NONE
            }
            val held = ArrayList<Tensor>(all.size)
            try {
                for (t in all) {
                    t.retain(operation)
                    held += t
                }
            } catch (e: Throwable) {
                for (t in held) t.release()
                throw e
            }
            return MpiTensorHolds(held)
        }
    }
}
