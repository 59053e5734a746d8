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
         * `timeout = ConformanceOptions.failureTimeout`. Aborting a split communicator leaves its
         * parent usable on every tpcomm backend (local, MPI, the NCCL engine; the cases of
         * `FailureSemanticsCases` check it), so a failure case on it does not end the parent.
         * The in-process harness still creates a fresh world per failure case, so that no case
         * can leave another a half-used parent.
         */
        @JvmField
        public val Split: ScratchCommunicatorFactory = ScratchCommunicatorFactory { parent, _ ->
            parent.split(0, parent.rank) ?: error("split(0) returned null on rank ${parent.rank}")
        }
    }
}
