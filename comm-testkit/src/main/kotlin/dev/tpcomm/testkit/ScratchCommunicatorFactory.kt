package dev.tpcomm.testkit

import dev.tpcomm.Communicator
import kotlin.time.Duration

/**
 * Gives [SpmdConformanceRunner] a fresh communicator for each [CaseKind.Failure] case, which aborts
 * its communicator on purpose. Called collectively: every rank calls [create] at the same point.
 * The runner closes the communicator after the case.
 */
public fun interface ScratchCommunicatorFactory {
    /**
     * A new communicator over the same ranks as [parent] whose calls time out after [timeout]
     * (`CommConfig.timeout`). Aborting it must not abort [parent].
     */
    public suspend fun create(parent: Communicator, timeout: Duration): Communicator

    public companion object {
        /**
         * `parent.split(0)`: a sub-communicator of every rank. It inherits the parent's timeout
         * (it cannot honour [create]'s), so use it when the parent itself was created with
         * `timeout = ConformanceOptions.failureTimeout`, and only with backends where aborting a
         * split communicator leaves its parent usable. The local backend is not one of them: an
         * abort there ends the whole world, parent included (in-process harnesses create a fresh
         * world per failure case instead).
         */
        @JvmField
        public val Split: ScratchCommunicatorFactory = ScratchCommunicatorFactory { parent, _ ->
            parent.split(0, parent.rank) ?: error("split(0) returned null on rank ${parent.rank}")
        }
    }
}
