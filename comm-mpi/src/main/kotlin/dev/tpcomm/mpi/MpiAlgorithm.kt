package dev.tpcomm.mpi

/**
 * A collective algorithm to force instead of the implementation's own choice. Each
 * implementation names its algorithms differently; [MpiConfig] translates these names into the
 * real knobs (Open MPI `OMPI_MCA_coll_tuned_*`, MPICH/MVAPICH `MPIR_CVAR_*`, Intel MPI
 * `I_MPI_ADJUST_*`) and refuses, with [IllegalArgumentException], an algorithm the loaded
 * implementation does not have for that collective.
 */
public enum class MpiAlgorithm {
    /** The implementation's own selection (nothing is set). */
    Auto,

    /** Every rank talks to the root (or all peers) directly. */
    Linear,

    /** Ring: bandwidth-optimal for large messages. */
    Ring,

    /** Recursive doubling: latency-optimal for small messages. */
    RecursiveDoubling,

    /** Rabenseifner's reduce-scatter followed by all-gather (all-reduce only). */
    Rabenseifner,

    /** Binomial tree (broadcast only). */
    BinomialTree,

    /** Bruck's algorithm (all-gather only). */
    Bruck,

    /** Scatter then ring all-gather (broadcast only). */
    ScatterAllGather,
}
