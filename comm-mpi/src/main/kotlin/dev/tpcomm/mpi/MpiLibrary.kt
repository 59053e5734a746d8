package dev.tpcomm.mpi

import dev.tpcomm.BackendUnavailableException
import dev.tpcomm.spi.CommunicationErrors
import java.lang.foreign.Arena
import java.lang.foreign.FunctionDescriptor
import java.lang.foreign.Linker
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.lang.invoke.MethodHandle

/**
 * An MPI library opened with `dlopen(RTLD_NOW | RTLD_GLOBAL)` and identified. One per process
 * ([loaded]); immutable once made.
 */
internal class MpiLibrary(
    /** What was opened (path or soname). */
    val path: String,
    /** The `dlopen` handle. */
    val handle: Long,
    /** `MPI_Get_library_version`'s text. */
    val version: String,
    val implementation: MpiImplementation,
) {
    val abi: MpiAbi by lazy { if (implementation.mpichAbi) MpichAbi else OpenMpiAbi { find(it) } }

    /** Address of [symbol] or 0. */
    fun find(symbol: String): Long = Libc.dlsym(handle, symbol)

    companion object {
        /** Debian packages to install, for the error message. */
        const val INSTALL_HINT: String =
            "install Open MPI ('apt-get install openmpi-bin libopenmpi-dev') or MPICH ('apt-get install mpich libmpich-dev'), " +
                "or set TPCOMM_MPI_LIBRARY (or the option mpi.library) to the path of libmpi.so / libmpich.so"

        private const val OPEN_MPI = "libmpi.so.40"
        private const val MPICH = "libmpich.so.12"
        private const val MPICH_ABI = "libmpi.so.12" // Intel MPI, MVAPICH, MPICH's libmpi name

        @Volatile private var current: MpiLibrary? = null
        private val lock = Any()

        /** The library this process opened, or null before [load]. */
        val loaded: MpiLibrary? get() = current

        /**
         * Where to look, first first: [configured] (MpiConfig.library), `TPCOMM_MPI_LIBRARY`, then
         * the sonames of the implementation whose launcher started this process, then the rest.
         */
        fun candidates(configured: String?, env: Map<String, String>): List<String> {
            val explicit = listOfNotNull(configured, env["TPCOMM_MPI_LIBRARY"]?.takeIf { it.isNotBlank() })
            if (explicit.isNotEmpty()) return explicit.distinct()
            val openMpiLauncher = env.keys.any { it.startsWith("OMPI_COMM_WORLD_") }
            val hydraLauncher = env.containsKey("PMI_RANK") || env.containsKey("HYDRA_CONTROL_FD") || env.containsKey("MPI_LOCALRANKID")
            val order = when {
                openMpiLauncher -> listOf(OPEN_MPI, MPICH, MPICH_ABI)
                hydraLauncher -> listOf(MPICH, MPICH_ABI, OPEN_MPI)
                else -> listOf(OPEN_MPI, MPICH, MPICH_ABI)
            }
            return order + "libmpi.so"
        }

        /**
         * Opens the first of [candidates] that loads and identifies it. Sets `UCX_ERROR_SIGNALS=""`
         * first (unless the user set it), so UCX does not replace the JVM's signal handlers.
         *
         * @throws BackendUnavailableException naming every candidate tried and why it failed.
         */
        fun open(candidates: List<String>): MpiLibrary {
            Libc.setenv("UCX_ERROR_SIGNALS", "", false)
            val failures = ArrayList<String>()
            for (path in candidates) {
                val h = Libc.dlopen(path, Libc.RTLD_NOW or Libc.RTLD_GLOBAL)
                if (h == 0L) {
                    failures += "$path: ${Libc.dlerror() ?: "dlopen failed"}"
                    continue
                }
                val fn = Libc.dlsym(h, "MPI_Get_library_version")
                if (fn == 0L) {
                    failures += "$path: no MPI_Get_library_version (not an MPI 3 library)"
                    continue
                }
                val version = libraryVersion(fn)
                val implementation = MpiImplementation.fromVersionString(version)
                if (implementation == null) {
                    failures += "$path: unknown MPI implementation \"${version.lineSequence().first()}\""
                    continue
                }
                return MpiLibrary(path, h, version, implementation)
            }
            throw CommunicationErrors.unavailable(
                "mpi",
                "no MPI library could be opened; tried ${failures.joinToString("; ")}. $INSTALL_HINT",
            )
        }

        /** Opens the process's library once (later calls return the first). */
        fun load(configured: String?, env: Map<String, String> = System.getenv()): MpiLibrary {
            current?.let { return it }
            synchronized(lock) {
                current?.let { return it }
                return open(candidates(configured, env)).also { current = it }
            }
        }

        private fun libraryVersion(fn: Long): String {
            // int MPI_Get_library_version(char *version, int *resultlen); callable before MPI_Init.
            val h: MethodHandle = Linker.nativeLinker().downcallHandle(
                MemorySegment.ofAddress(fn),
                FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.ADDRESS),
            )
            Arena.ofConfined().use { a ->
                val buf = a.allocate(8192)
                val len = a.allocate(ValueLayout.JAVA_INT)
                val rc = h.invokeExact(buf, len) as Int
                if (rc != 0) return "unknown (MPI_Get_library_version returned $rc)"
                val n = len.get(ValueLayout.JAVA_INT, 0).coerceIn(0, 8191)
                return String(buf.asSlice(0, n.toLong()).toArray(ValueLayout.JAVA_BYTE), Charsets.UTF_8).trimEnd('\u0000').trim()
            }
        }
    }
}
