package dev.tpcomm.mpi

/**
 * Translates [MpiConfig]'s algorithm choices into each implementation's environment variables,
 * which must be set (libc `setenv`) before `MPI_Init_thread`. Pure; thread-safe.
 */
internal object MpiTuning {
    enum class Collective(val label: String) { AllReduce("allReduce"), Broadcast("broadcast"), AllGather("allGather") }

    private val openMpiNumbers: Map<Collective, Map<MpiAlgorithm, Int>> = mapOf(
        Collective.AllReduce to mapOf(
            MpiAlgorithm.Linear to 1, MpiAlgorithm.RecursiveDoubling to 3, MpiAlgorithm.Ring to 4, MpiAlgorithm.Rabenseifner to 6,
        ),
        Collective.Broadcast to mapOf(
            MpiAlgorithm.Linear to 1, MpiAlgorithm.BinomialTree to 6, MpiAlgorithm.ScatterAllGather to 9,
        ),
        Collective.AllGather to mapOf(
            MpiAlgorithm.Linear to 1, MpiAlgorithm.Bruck to 2, MpiAlgorithm.RecursiveDoubling to 3, MpiAlgorithm.Ring to 4,
        ),
    )

    private val mpichNames: Map<Collective, Map<MpiAlgorithm, String>> = mapOf(
        Collective.AllReduce to mapOf(
            MpiAlgorithm.RecursiveDoubling to "recursive_doubling", MpiAlgorithm.Ring to "ring",
            MpiAlgorithm.Rabenseifner to "reduce_scatter_allgather",
        ),
        Collective.Broadcast to mapOf(
            MpiAlgorithm.BinomialTree to "binomial", MpiAlgorithm.ScatterAllGather to "scatter_ring_allgather",
        ),
        Collective.AllGather to mapOf(
            MpiAlgorithm.Bruck to "brucks", MpiAlgorithm.RecursiveDoubling to "recursive_doubling", MpiAlgorithm.Ring to "ring",
        ),
    )

    private val intelNumbers: Map<Collective, Map<MpiAlgorithm, Int>> = mapOf(
        Collective.AllReduce to mapOf(
            MpiAlgorithm.RecursiveDoubling to 1, MpiAlgorithm.Rabenseifner to 2, MpiAlgorithm.Ring to 8,
        ),
        Collective.Broadcast to mapOf(
            MpiAlgorithm.BinomialTree to 1, MpiAlgorithm.ScatterAllGather to 3,
        ),
        Collective.AllGather to mapOf(
            MpiAlgorithm.RecursiveDoubling to 1, MpiAlgorithm.Bruck to 2, MpiAlgorithm.Ring to 3,
        ),
    )

    private val mpichKey = mapOf(
        Collective.AllReduce to "ALLREDUCE", Collective.Broadcast to "BCAST", Collective.AllGather to "ALLGATHER",
    )
    private val openMpiKey = mapOf(
        Collective.AllReduce to "allreduce", Collective.Broadcast to "bcast", Collective.AllGather to "allgather",
    )

    /**
     * The variables to set for [choices] on [implementation].
     *
     * @throws IllegalArgumentException when [implementation] has no such algorithm for that collective.
     */
    fun environment(implementation: MpiImplementation, choices: Map<Collective, MpiAlgorithm>): Map<String, String> {
        val env = LinkedHashMap<String, String>()
        for ((collective, algorithm) in choices) {
            if (algorithm == MpiAlgorithm.Auto) continue
            fun refuse(available: Collection<MpiAlgorithm>): Nothing = throw IllegalArgumentException(
                "MpiConfig: ${implementation.name} has no $algorithm algorithm for ${collective.label}; " +
                    "choose one of ${(listOf(MpiAlgorithm.Auto) + available).joinToString()}",
            )
            when (implementation) {
                MpiImplementation.OpenMpi -> {
                    val table = openMpiNumbers.getValue(collective)
                    val n = table[algorithm] ?: refuse(table.keys)
                    env["OMPI_MCA_coll_tuned_use_dynamic_rules"] = "1"
                    env["OMPI_MCA_coll_tuned_${openMpiKey.getValue(collective)}_algorithm"] = n.toString()
                }
                MpiImplementation.Mpich, MpiImplementation.Mvapich -> {
                    val table = mpichNames.getValue(collective)
                    val name = table[algorithm] ?: refuse(table.keys)
                    val key = mpichKey.getValue(collective)
                    env["MPIR_CVAR_${key}_DEVICE_COLLECTIVE"] = "0"
                    env["MPIR_CVAR_${key}_INTRA_ALGORITHM"] = name
                }
                MpiImplementation.IntelMpi -> {
                    val table = intelNumbers.getValue(collective)
                    val n = table[algorithm] ?: refuse(table.keys)
                    env["I_MPI_ADJUST_${mpichKey.getValue(collective)}"] = n.toString()
                }
            }
        }
        return env
    }
}
