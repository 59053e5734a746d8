package dev.tpcomm.mpi

import dev.tpcomm.BackendUnavailableException
import dev.tpcomm.CommBackendFactory
import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.Communicator
import dev.tpcomm.engine.CommunicatorCreation
import dev.tpcomm.spi.CommunicationErrors
import dev.tpcomm.spi.LaunchEnvironment
import java.lang.foreign.Arena
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.util.concurrent.atomic.AtomicInteger

/**
 * The MPI backend's entry in `ServiceLoader` (`mpi`, priority 50).
 *
 * [isAvailable] is true when this process was started by an MPI launcher (`OMPI_COMM_WORLD_*`,
 * `PMI_*`/`PMIX_*`, `MPI_LOCALRANKID`) and an MPI library opens (it is not initialised); or when
 * no launcher did, the environment describes several processes (torchrun's `RANK`/`WORLD_SIZE`,
 * ...) and names a store (`MASTER_ADDR`, or `TPCOMM_RENDEZVOUS` `env://`/`tcp://host:port`) and
 * the library is Open MPI, which then forms the world through that store ([MpiStoreWorld]:
 * `ompi-server` on rank 0's host, accept/connect in rank order). [create] also works without a
 * launcher for a world of one: MPI then runs a singleton world of one rank.
 * Thread-safe.
 */
public class MpiBackendFactory @JvmOverloads constructor(
    private val env: Map<String, String> = System.getenv(),
) : CommBackendFactory {
    override val name: String get() = "mpi"
    override val priority: Int get() = 50

    override fun isAvailable(): Boolean = unavailableReason() == null

    /**
     * Why MPI cannot form [config]'s world here, or null: no MPI launcher started this process,
     * yet [config] or the environment describes several processes (torchrun's, Kubeflow's or
     * Slurm's variables), and no store is named through which MPI could form the world
     * ([MpiStoreWorld]: `MASTER_ADDR`, or rendezvous `env://`/`tcp://`). MPI would start a
     * singleton world of one rank in each process.
     */
    private fun noLauncherRefusal(config: CommConfig): String? {
        if (launched(env)) return null
        val launch = LaunchEnvironment.read(env)
        if (config.worldSize <= 1 && !launch.spansProcesses) return null
        if (MpiStoreWorld.rendezvous(config, env) != null) return null
        val described = if (launch.launcher != null) {
            "${launch.processes} processes started by ${launch.launcher} (${launch.variables.joinToString(" ")})"
        } else {
            "a world of ${config.worldSize} ranks (CommConfig.worldSize)"
        }
        return "no MPI launcher started this process (no OMPI_COMM_WORLD_*, PMI_*, PMIX_* or MPI_LOCALRANKID variables), " +
            "but it is one of $described, and no store is named through which MPI could form the world: without one each " +
            "process would be a singleton world of one rank. Start the job with mpirun or mpiexec (or srun --mpi=pmix); or set " +
            "MASTER_ADDR and MASTER_PORT (rank 0's host and a free port; or CommConfig.rendezvous \"tcp://host:port\") and Open MPI " +
            "forms the world through that store (ompi-server on rank 0's host); or, under torchrun, Kubernetes or srun without " +
            "MPI, use \"nccl\" or \"rccl\" with rendezvous env:// (MASTER_ADDR, MASTER_PORT) or tcp://host:port"
    }

    /** The store through which MPI forms [config]'s world ([MpiStoreWorld]), or null (an MPI launcher's world, or a world of one). */
    private fun storeRendezvous(config: CommConfig): String? {
        if (launched(env)) return null
        if (config.worldSize <= 1 && !LaunchEnvironment.read(env).spansProcesses) return null
        return MpiStoreWorld.rendezvous(config, env)
    }

    override fun unavailableReason(): String? {
        if (!launched(env) && LaunchEnvironment.read(env).spansProcesses &&
            MpiStoreWorld.rendezvous(CommConfig(rendezvous = env["TPCOMM_RENDEZVOUS"]), env) != null
        ) {
            // No launcher, but a store: Open MPI forms the world from it (MpiStoreWorld); MPICH cannot.
            return try {
                MpiStoreWorld.refusal(MpiLibrary.load(MpiConfig.from(emptyMap(), env).library, env))
            } catch (e: BackendUnavailableException) {
                e.reason
            } catch (e: IllegalArgumentException) {
                e.message
            }
        }
        if (!launched(env)) {
            return "not started by an MPI launcher (no OMPI_COMM_WORLD_*, PMI_*, PMIX_* or MPI_LOCALRANKID variables); " +
                "run under mpirun, or ask for backend \"mpi\" explicitly for a singleton world of one rank"
        }
        return try {
            MpiLibrary.load(MpiConfig.from(emptyMap(), env).library, env)
            null
        } catch (e: BackendUnavailableException) {
            e.reason
        } catch (e: IllegalArgumentException) {
            e.message
        }
    }

    /**
     * Initialises MPI (once per process, with [MpiConfig.from] of [CommConfig.options]) and
     * returns this process's communicator over a duplicate of `MPI_COMM_WORLD`. Collective over
     * every process of the job. Without an MPI launcher, in a job of several processes that names a
     * store (`MASTER_ADDR`/`MASTER_PORT`, or rendezvous `env://`/`tcp://host:port`), Open MPI forms
     * the world through the store first ([MpiStoreWorld]; docs/launch.md), its ranks the store's.
     *
     * @throws BackendUnavailableException when no MPI library can be opened (saying what was tried
     * and which package to install); without a launcher, when the environment describes several
     * processes but names no store, when the library is MPICH's (no `MPI_Open_port` in its
     * `ch4:ucx`), or when rank 0 cannot start `ompi-server` (on every rank, with rank 0's reason).
     * @throws dev.tpcomm.CommunicatorAbortedException without a launcher, when rank 0 (which hosts
     * the store) died before the world formed.
     * @throws IllegalArgumentException when [config]'s worldSize/rank contradict MPI's, or an MPI
     * option is invalid.
     * @throws CommunicationTimeoutException when MPI did not start within [CommConfig.effectiveCreationTimeout] (a
     * rank of the job has not arrived); with [MpiConfig.abortOnTimeout] (the default) the process
     * instead prints it and ends with exit code 14, which makes the launcher end the job. Without a
     * launcher, a rank that never reached the store names that rank, a tenth of the timeout (at most
     * 2 s) before it, and the process is not ended.
     */
    override suspend fun create(config: CommConfig): Communicator {
        noLauncherRefusal(config)?.let { throw CommunicationErrors.unavailable(name, it) }
        val mpiConfig = MpiConfig.from(config.options, env)
        storeRendezvous(config)?.let { return createFromStore(config, mpiConfig, it) }
        val rank = listOf("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK").firstNotNullOfOrNull { env[it]?.toIntOrNull() } ?: config.rank
        // MPI_Init_thread and MPI_Comm_dup(MPI_COMM_WORLD) wait for every rank of the job (Open
        // MPI's init ends in a PMIx fence, MPICH's in a PMI barrier): run them on a helper thread
        // and wait at most the timeout, so a rank that never starts cannot hold this one forever.
        return CommunicatorCreation(rank, "mpi", config.effectiveCreationTimeout).onOwnThread(
            "tpcomm-mpi-create",
            lateMessage = {
                "MPI did not start within ${config.effectiveCreationTimeout} (CommConfig.creationTimeout): MPI_Init_thread and MPI_Comm_dup(MPI_COMM_WORLD) wait for every rank " +
                    "of the job, and a rank has not arrived (it starts late, is stuck, or died)" +
                    if (mpiConfig.abortOnTimeout) "; ending this process with exit code ${MpiBackend.ABORT_CODE} so that the launcher ends the job" else ""
            },
            beforeThrow = { e ->
                System.err.println("tpcomm-mpi: rank $rank: ${e.javaClass.name}: ${e.message}")
                System.err.flush()
                if (mpiConfig.abortOnTimeout) {
                    // MPI is not (fully) initialised, so MPI_Abort is not allowed: end the process; the
                    // launcher sees a rank exit non-zero and ends the others (Open MPI and MPICH alike).
                    System.out.flush()
                    haltProcess(MpiBackend.ABORT_CODE)
                }
            },
        ) {
            val runtime = MpiRuntime.initialize(mpiConfig, env)
            wrap(runtime, runtime.binding, 0L, config, mpiConfig, "world")
        }
    }

    /**
     * The world of a job no MPI launcher started, formed by Open MPI through the store at
     * [rendezvous] ([MpiStoreWorld]), then made as over `MPI_COMM_WORLD`. The creation's timeout
     * and [MpiConfig.abortOnTimeout] apply as under a launcher.
     */
    private suspend fun createFromStore(config: CommConfig, mpiConfig: MpiConfig, rendezvous: String): Communicator {
        val creation = CommunicatorCreation(config.rank, "mpi", config.effectiveCreationTimeout)
        return creation.onOwnThread(
            "tpcomm-mpi-create",
            lateMessage = {
                "MPI did not form the world through the store ($rendezvous) within ${config.effectiveCreationTimeout} (CommConfig.creationTimeout): a rank is blocked in " +
                    "MPI_Comm_accept/MPI_Comm_connect or MPI_Init_thread (a peer died or is stuck there)" +
                    if (mpiConfig.abortOnTimeout) "; ending this process with exit code ${MpiBackend.ABORT_CODE}" else ""
            },
            beforeThrow = { e ->
                System.err.println("tpcomm-mpi: rank ${config.rank}: ${e.javaClass.name}: ${e.message}")
                System.err.flush()
                if (mpiConfig.abortOnTimeout) {
                    System.out.flush()
                    haltProcess(MpiBackend.ABORT_CODE)
                }
            },
        ) {
            val runtime = MpiStoreWorld(config, mpiConfig, env, rendezvous, creation).form()
            wrap(runtime, runtime.binding, 0L, config, mpiConfig, "world", formedWorld = runtime.formedWorld)
        }
    }

    /**
     * A communicator over the ranks of an MPI communicator your program already has: [handle] is
     * its `MPI_Comm` as the library tpcomm loads represents it (Open MPI: the `ompi_communicator_t`
     * pointer; MPICH and its ABI family: the integer handle), e.g. `MPI_COMM_WORLD`
     * ([worldHandle]) or a communicator another library made. Collective over the ranks of [handle]:
     * every one of them must call it.
     *
     * **Ownership.** tpcomm never frees, modifies or finalizes what it did not create. It makes
     * its own duplicate of [handle] (`MPI_Comm_dup`; its messages never mix with yours), sets its
     * error handler on that duplicate only, and frees the duplicate when the returned communicator
     * is closed; [handle] stays yours, usable after [MpiCommunicator.close] and freed (if at all) by
     * you. When your program initialised MPI, tpcomm uses that initialisation and never calls
     * `MPI_Finalize` (you do); if tpcomm initialised it (a [create] or a `wrap` before your
     * `MPI_Init`), the last tpcomm communicator to close finalizes it, as after [create].
     *
     * The library must be the one your program uses (tpcomm picks it as [create] does:
     * `TPCOMM_MPI_LIBRARY` or the default search), with MPI initialised at `MPI_THREAD_MULTIPLE`
     * when calls may come from several threads. Rank and size come from [handle];
     * [CommConfig.worldSize] and [CommConfig.rank] of [config] are ignored; its timeout, consistency
     * checks, flight recorder and MPI options apply.
     *
     * @throws IllegalArgumentException when [handle] is `MPI_COMM_NULL`.
     * @throws BackendUnavailableException when no MPI library can be opened.
     * @throws CommunicationTimeoutException when the duplicate was not made within
     * [CommConfig.effectiveCreationTimeout] (a rank of [handle] did not call `wrap`); the process is not ended.
     * @throws IllegalStateException when MPI refuses the duplicate (e.g. [handle] is not a valid communicator).
     */
    @JvmOverloads
    public suspend fun wrap(handle: Long, config: CommConfig = CommConfig()): MpiCommunicator {
        val mpiConfig = MpiConfig.from(config.options, env)
        val abi = MpiLibrary.load(mpiConfig.library, env).abi
        require(handle != abi.commNull) { "wrap: the handle is MPI_COMM_NULL; pass a communicator this rank belongs to" }
        return CommunicatorCreation(config.rank, "mpi", config.effectiveCreationTimeout).onOwnThread(
            "tpcomm-mpi-wrap",
            lateMessage = {
                "wrap: MPI_Comm_dup of the given communicator did not complete within ${config.effectiveCreationTimeout} (CommConfig.creationTimeout): it is collective, and a rank of " +
                    "that communicator has not called wrap (it starts late, is stuck, or died)"
            },
        ) {
            val runtime = MpiRuntime.initialize(mpiConfig, env)
            wrap(runtime, runtime.binding, 0L, config, mpiConfig, "wrapped", duplicateOf = handle)
        }
    }

    /**
     * The handle of `MPI_COMM_WORLD` in the library tpcomm loads (opened, not initialised), for
     * [wrap]: Open MPI's `&ompi_mpi_comm_world`, MPICH's `0x44000000`.
     *
     * @throws BackendUnavailableException when no MPI library can be opened.
     */
    public fun worldHandle(): Long = MpiLibrary.load(MpiConfig.from(emptyMap(), env).library, env).abi.commWorld

    internal companion object {
        private val counter = AtomicInteger()

        /** Ends the process after a `create` timeout ([MpiConfig.abortOnTimeout]); replaced by tests. */
        @Volatile var haltProcess: (Int) -> Unit = { Runtime.getRuntime().halt(it) }

        fun launched(env: Map<String, String>): Boolean = env.keys.any {
            it.startsWith("OMPI_COMM_WORLD_") || it.startsWith("PMI_") || it.startsWith("PMIX_") || it == "MPI_LOCALRANKID"
        }

        /**
         * Makes a communicator on its MPI thread ([MpiRuntime.dispatcherFor]) over [existing] (or,
         * when 0, a new duplicate of `MPI_COMM_WORLD`): sets `MPI_ERRORS_RETURN`, reads rank and size.
         */
        suspend fun wrap(
            runtime: MpiRuntime,
            binding: MpiBinding,
            existing: Long,
            config: CommConfig,
            mpiConfig: MpiConfig,
            name: String,
            /** The private duplicate of [existing] for abort notices, when the caller already made it (split, duplicate); 0 to make it here. */
            existingControl: Long = 0L,
            /** With [existing] 0: the user's communicator to duplicate instead of `MPI_COMM_WORLD` (public [wrap]); 0 for the world. */
            duplicateOf: Long = 0L,
            /** With [existing] 0: the world [MpiStoreWorld] formed, duplicated instead of `MPI_COMM_WORLD`; 0 for `MPI_COMM_WORLD`. */
            formedWorld: Long = 0L,
        ): MpiCommunicator {
            runtime.retain()
            val (dispatcher, ownsDispatcher) = runtime.dispatcherFor("$name-${counter.incrementAndGet()}")
            try {
                val abi = binding.abi
                val (handles, rank, size) = dispatcher.execute {
                    Arena.ofConfined().use { a ->
                        val out = a.allocate(16, 8)
                        // Errors MPICH raises on no communicator (request completion in MPI_Test,
                        // generated bindings calling MPIR_Err_return_comm(NULL, ...)) use
                        // MPI_COMM_WORLD's handler: make them return codes too, not aborts.
                        // A user's communicator (duplicateOf) leaves MPI_COMM_WORLD's handler as the program set it.
                        if (existing == 0L && duplicateOf == 0L) binding.commSetErrhandler(abi.commWorld, abi.errorsReturn)
                        val handle = if (existing != 0L) existing else {
                            val source = if (duplicateOf != 0L) duplicateOf else if (formedWorld != 0L) formedWorld else abi.commWorld
                            val rc = binding.commDup(source, out.address())
                            check(rc == 0) {
                                val what = if (duplicateOf != 0L) "the given communicator" else if (formedWorld != 0L) "the world formed through the store" else "MPI_COMM_WORLD"
                                "MPI_Comm_dup($what) failed: ${MpiErrors.describe(binding, rc)}"
                            }
                            abi.readHandle(out, 0)
                        }
                        check(binding.commSetErrhandler(handle, abi.errorsReturn) == 0) { "MPI_Comm_set_errhandler failed" }
                        val control = if (existingControl != 0L) existingControl else {
                            val rcDup = binding.commDup(handle, out.address())
                            check(rcDup == 0) { "MPI_Comm_dup failed: ${MpiErrors.describe(binding, rcDup)}" }
                            abi.readHandle(out, 0)
                        }
                        check(binding.commRank(handle, out.address()) == 0) { "MPI_Comm_rank failed" }
                        val rank = out.get(ValueLayout.JAVA_INT, 0)
                        check(binding.commSize(handle, out.address()) == 0) { "MPI_Comm_size failed" }
                        val size = out.get(ValueLayout.JAVA_INT, 0)
                        // MPI_TAG_UB: the largest tag (MPICH 4.0: 2^28 - 1 with ch4:ucx; Open MPI 4.1: 2^31 - 1).
                        val attr = a.allocate(16, 8)
                        val tagUb = if (binding.commGetAttr(handle, abi.tagUbKey, attr.address(), attr.address() + 8) == 0 &&
                            attr.get(ValueLayout.JAVA_INT, 8) != 0 && attr.get(ValueLayout.JAVA_LONG, 0) != 0L
                        ) {
                            MemorySegment.ofAddress(attr.get(ValueLayout.JAVA_LONG, 0)).reinterpret(4).get(ValueLayout.JAVA_INT, 0)
                        } else {
                            32767 // the standard's minimum
                        }
                        Triple(longArrayOf(handle, control, tagUb.toLong()), rank, size)
                    }
                }
                if (existing == 0L && duplicateOf == 0L && config.worldSize > 1) {
                    require(config.worldSize == size && config.rank == rank) {
                        "CommConfig says rank ${config.rank} of ${config.worldSize}, but MPI_COMM_WORLD has this process as rank $rank of $size; " +
                            "pass CommConfig.fromEnvironment() (or leave worldSize at 1) when running under mpirun"
                    }
                }
                if (existing == 0L && duplicateOf == 0L) runtime.worldRank = rank
                runtime.noteTimeout(config.timeout.inWholeNanoseconds)
                val commConfig = config.copy(worldSize = size, rank = rank, localRank = if (config.worldSize > 1 && duplicateOf == 0L) config.localRank else rank)
                return MpiCommunicator(runtime, binding, handles[0], handles[1], rank, size, commConfig, mpiConfig, dispatcher, ownsDispatcher, name, handles[2].toInt())
            } catch (t: Throwable) {
                if (ownsDispatcher) dispatcher.close()
                runtime.release()
                throw t
            }
        }
    }
}
