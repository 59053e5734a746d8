package dev.tpcomm.mpi

/**
 * The MPI implementation a process loaded, identified at run time from `MPI_Get_library_version`.
 *
 * Intel MPI and MVAPICH are derived from MPICH and keep its ABI (integer handles, MPICH's
 * `MPI_Status` layout), so they run through the MPICH binding. Immutable; thread-safe.
 */
public enum class MpiImplementation(
    /** Short name used in CSV output and test names (`openmpi`, `mpich`, ...). */
    public val id: String,
    /** Whether the library uses MPICH's ABI (integer handles) rather than Open MPI's (pointer handles). */
    public val mpichAbi: Boolean,
) {
    /** Open MPI (`libmpi.so.40`): handles are addresses of `ompi_mpi_*` symbols. */
    OpenMpi("openmpi", false),

    /** MPICH (`libmpich.so.12`). */
    Mpich("mpich", true),

    /** Intel MPI Library: MPICH ABI; tuned through `I_MPI_ADJUST_*`. */
    IntelMpi("intelmpi", true),

    /** MVAPICH: MPICH ABI; tuned through `MPIR_CVAR_*` as MPICH. */
    Mvapich("mvapich", true);

    public companion object {
        /**
         * The implementation named by a library version string, or null when it is none of the
         * four (the string is then reported in the error).
         */
        @JvmStatic
        public fun fromVersionString(version: String): MpiImplementation? = when {
            version.contains("Open MPI", ignoreCase = true) -> OpenMpi
            version.contains("Intel(R) MPI", ignoreCase = true) || version.contains("Intel MPI", ignoreCase = true) -> IntelMpi
            version.contains("MVAPICH", ignoreCase = true) -> Mvapich
            version.contains("MPICH", ignoreCase = true) -> Mpich
            else -> null
        }
    }
}
