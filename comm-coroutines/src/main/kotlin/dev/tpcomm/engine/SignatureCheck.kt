package dev.tpcomm.engine

import dev.tpcomm.InternalTpcommApi

/**
 * What comparing the ranks' signatures of each collective costs a backend, from which the front
 * decides, in one place, whether a communicator compares them ([CommunicatorFront.checksSignatures]):
 * `CommConfig.checkConsistency` when the user set it, this default otherwise. A communicator of one
 * rank never compares.
 */
@InternalTpcommApi
public enum class SignatureCheck {
    /** Free: the signatures meet where the data meets (the in-process slot): always compared, whatever the configuration says. */
    Always,

    /** Cheap: one small exchange per collective (MPI's 64-byte slot): compared unless `checkConsistency = false`. */
    ByDefault,

    /** Costly: the exchange waits for the device (the GPU engine's staged all-gather): compared only with `checkConsistency = true`. */
    OnRequest,
    ;

    /** Whether a communicator of [worldSize] ranks whose user configured [checkConsistency] (null: not set) compares signatures. */
    public fun enabled(checkConsistency: Boolean?, worldSize: Int): Boolean = worldSize > 1 && when (this) {
        Always -> true
        ByDefault -> checkConsistency ?: true
        OnRequest -> checkConsistency == true
    }
}
