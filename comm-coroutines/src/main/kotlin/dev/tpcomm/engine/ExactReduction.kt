package dev.tpcomm.engine

/**
 * The `extra` of an all-reduce or reduce that the backend reduces reproducibly itself: every
 * element the correctly rounded sum (or average) of the ranks' values, as [ExactSum] gives it,
 * with the signature's `op` word marking the reproducible op. Issued by [ReproducibleReductions]
 * for `Sum` and `Avg` of host tensors when [CommunicatorBackend.reducesExactly] (the in-process
 * backend, whose ranks share memory: every rank's input is read once, no staging copies); the
 * bits are those of the composed path.
 */
internal object ExactReduction
