package dev.tpcomm

/**
 * Service-provider interface of a backend, found with `java.util.ServiceLoader`: a backend module
 * lists its implementation in `META-INF/services/dev.tpcomm.CommBackendFactory`.
 *
 * Implementations must be cheap to construct and thread-safe; [isAvailable] must not throw and must
 * not initialise the native library more than needed to answer.
 */
public interface CommBackendFactory {
    /** Name users pass to [Comm.create]: `local`, `mpi`, `nccl`, `rccl`. */
    public val name: String

    /** Rank for `"auto"`: the highest available wins (NCCL 100, RCCL 90, MPI 50, local 10). */
    public val priority: Int

    /** Whether [create] can succeed in this process (library loads, device visible, launcher present). */
    public fun isAvailable(): Boolean

    /** Why [isAvailable] is false, with what to install or set; null when available. */
    public fun unavailableReason(): String? = null

    /**
     * Creates this process's communicator. Collective across the ranks of [config].
     *
     * @throws BackendUnavailableException when the backend cannot run here.
     */
    public suspend fun create(config: CommConfig): Communicator
}
