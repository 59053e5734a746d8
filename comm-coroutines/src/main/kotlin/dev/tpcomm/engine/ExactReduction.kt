package dev.tpcomm.engine

import dev.tpcomm.InternalTpcommApi

/**
 * The `extra` of an all-reduce or reduce that the backend reduces reproducibly itself: every
 * element the correctly rounded sum (or average) of the ranks' values, as [ExactSum] gives it,
 * with the signature's `op` word marking the reproducible op. Issued by [ReproducibleReductions]
 * for `Sum` and `Avg` of host tensors when [CommunicatorBackend.reducesExactly]: the in-process
 * backend reads every rank's input once (no staging copies); MPI gathers the small inputs and sums
 * them on the host. The bits are those of the composed path.
 */
@InternalTpcommApi
public object ExactReduction
