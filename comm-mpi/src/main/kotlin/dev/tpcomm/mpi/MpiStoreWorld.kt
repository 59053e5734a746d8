package dev.tpcomm.mpi

import dev.tpcomm.CommConfig
import dev.tpcomm.engine.CommunicatorCreation
import dev.tpcomm.spi.CommunicationErrors
import dev.tpcomm.store.Store
import dev.tpcomm.store.StoreConnectionException
import dev.tpcomm.store.StoreRendezvous
import dev.tpcomm.store.StoreTimeoutException
import kotlin.time.Duration
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.nanoseconds

/**
 * A world that MPI forms from the store, without `mpirun` (issue 33 part 4): the processes of a
 * job that torchrun, a Kubernetes job or a hand-written script started with `MASTER_ADDR`,
 * `MASTER_PORT`, `RANK` and `WORLD_SIZE` (or `CommConfig.rendezvous` `env://` / `tcp://host:port`)
 * each start MPI as a singleton and join into one communicator, as Open MPI's own tools for
 * separately started jobs do:
 *
 * 1. every rank connects to the job's store ([StoreRendezvous]: rank 0 hosts it unless torchrun's
 *    agent does); rank 0 starts [OmpiServer] and publishes its URI (or why it could not);
 * 2. every rank sets `OMPI_MCA_pmix_server_uri` to that URI in its native environment (libc
 *    `setenv`, before `MPI_Init_thread`: the singleton's `orted`, forked by `MPI_Init_thread`,
 *    reads it at its start, `orte/runtime/orte_mca_params.c` registers it) and initialises MPI;
 * 3. rank 0 opens a port (`MPI_Open_port`) and publishes its name; ranks join one at a time in rank
 *    order: rank k waits until rank k-1 joined, `MPI_Comm_connect`s on `MPI_COMM_SELF` while the
 *    ranks 0..k-1 `MPI_Comm_accept` together, and both sides `MPI_Intercomm_merge` (the old group
 *    low, the newcomer high), so rank k of the store is rank k of the merged communicator.
 *
 * The world's communicator is then made over that merged communicator as over `MPI_COMM_WORLD`.
 * Joining is N-1 rounds of accept/connect, each collective over the ranks already joined.
 *
 * Failures, each a named exception before the creation's timeout (a margin before it, so that the
 * named one, not the generic "MPI did not start", is what the caller sees): `ompi-server` missing
 * on rank 0 ([dev.tpcomm.BackendUnavailableException] on every rank, with rank 0's reason); a rank
 * that never comes ([dev.tpcomm.CommunicationTimeoutException] naming it); rank 0 dying, which
 * takes the store down ([dev.tpcomm.CommunicatorAbortedException] naming rank 0). A peer that dies
 * inside `MPI_Comm_accept`/`MPI_Comm_connect` leaves the others blocked in Open MPI until the
 * creation's timeout. Only Open MPI can do this here ([refusal]).
 */
internal class MpiStoreWorld(
    private val config: CommConfig,
    private val mpiConfig: MpiConfig,
    private val env: Map<String, String>,
    private val rendezvous: String,
    private val creation: CommunicatorCreation,
) {
    private val rank = config.rank
    private val size = config.worldSize
    private val started = System.nanoTime()
    private val deadline = started + (creation.timeout - margin(creation.timeout)).inWholeNanoseconds
    private var where = rendezvous

    private fun left(): Duration = (deadline - System.nanoTime()).coerceAtLeast(1_000_000L).nanoseconds

    /** How long each step took, for [MpiStoreWorldTiming]. */
    private val steps = LinkedHashMap<String, Long>()

    private fun mark(step: String) {
        steps[step] = (System.nanoTime() - started) / 1_000_000
    }

    /**
     * Forms the world: initialises MPI (the returned runtime's [MpiRuntime.formedWorld] is the
     * merged communicator of every rank, ranks as the store's). Collective over the job's ranks.
     */
    suspend fun form(): MpiRuntime {
        val library = MpiLibrary.load(mpiConfig.library, env)
        refusal(library)?.let { throw CommunicationErrors.unavailable("mpi", it) }
        MpiRuntime.current?.let { current ->
            if (current.formedWorld != 0L) return current
            throw IllegalStateException(
                "MPI was already initialised in this process as a world of its own (a Comm.create(\"mpi\") with worldSize 1, or a " +
                    "wrap), so it cannot join a world formed through the store: create the world's communicator first",
            )
        }
        val address = StoreRendezvous.address(rendezvous, env)
        where = "${address.host}:${address.port}"
        val store = step("connecting to the job's store at $where (hosted by rank 0)", who = 0, connecting = true) {
            StoreRendezvous.connect(address, rank, left())
        }
        try {
            val s = store.withPrefix(PREFIX)
            mark("store")
            val uri = serverUri(s)
            mark("ompi-server")
            // Before MPI_Init_thread: the singleton's orted reads it when MPI_Init_thread starts it.
            Libc.setenv(SERVER_URI_VARIABLE, uri, true)
            val runtime = MpiRuntime.initialize(mpiConfig, env)
            mark("MPI_Init")
            try {
                runtime.formedWorld = join(runtime, library, s)
            } catch (t: Throwable) {
                // Peers may never finish what this rank left: MPI_Finalize waits at most the broken wait.
                runtime.broken = true
                throw t
            }
            mark("joined")
            timing = MpiStoreWorldTiming(rank, size, steps.toMap())
            return runtime
        } finally {
            store.close()
        }
    }

    /** Rank 0 starts `ompi-server` and publishes its URI (or `error:` and why); the others read it. */
    private suspend fun serverUri(s: Store): String {
        if (rank == 0) {
            val uri = try {
                OmpiServer.start(env, left().inWholeMilliseconds.coerceAtMost(SERVER_START_MILLIS))
            } catch (e: dev.tpcomm.BackendUnavailableException) {
                // Tell the others why, and stay (hosting the store) until each has read it, within the timeout.
                runCatching {
                    s.set(SERVER_KEY, (ERROR_PREFIX + e.reason).toByteArray())
                    if (size > 1) s.wait(listOf("$ERROR_SEEN_KEY/${size - 1}"), left())
                }
                throw e
            }
            step("publishing ompi-server's URI") { s.set(SERVER_KEY, uri.toByteArray()) }
            return uri
        }
        val value = String(step("waiting for rank 0 to start ompi-server", who = 0) { s.get(SERVER_KEY, left()) })
        if (value.startsWith(ERROR_PREFIX)) {
            // Rank 0 waits (hosting the store) until the last rank has read its reason.
            runCatching { s.set("$ERROR_SEEN_KEY/${s.add(ERROR_SEEN_KEY, 1)}", byteArrayOf(1)) }
            throw CommunicationErrors.unavailable("mpi", "rank 0 could not form the world: ${value.removePrefix(ERROR_PREFIX)}")
        }
        return value
    }

    /** The accept/connect rounds: the merged communicator of every rank. */
    private suspend fun join(runtime: MpiRuntime, library: MpiLibrary, s: Store): Long {
        val (thread, ownsThread) = runtime.dispatcherFor("join")
        try {
            val mpi = thread.execute { MpiDynamicProcess(library, runtime.binding) }
            var world = mpi.commSelf
            val port: String
            if (rank == 0) {
                port = thread.execute { mpi.openPort() }
                step("publishing the port") { s.set(PORT_KEY, port.toByteArray()) }
            } else {
                step("telling the others this rank started MPI") { s.set("$ARRIVED_KEY/$rank", byteArrayOf(1)) }
                if (rank > 1) step("waiting for rank ${rank - 1} to join (ranks join in order)", who = rank - 1) { s.wait(listOf("$JOINED_KEY/${rank - 1}"), left()) }
                port = String(step("waiting for rank 0's port", who = 0) { s.get(PORT_KEY, left()) })
                world = thread.execute {
                    val inter = mpi.connect(port, mpi.commSelf)
                    mpi.merge(inter, high = true).also { mpi.free(inter) }
                }
                step("telling the others this rank joined") { s.set("$JOINED_KEY/$rank", byteArrayOf(1)) }
            }
            for (next in rank + 1 until size) {
                step("waiting for rank $next to start MPI (ranks 0..${next - 1} have joined)", who = next) {
                    s.wait(listOf("$ARRIVED_KEY/$next"), left())
                }
                val old = world
                world = thread.execute {
                    val inter = mpi.accept(port, old)
                    mpi.merge(inter, high = false).also {
                        mpi.free(inter)
                        mpi.free(old)
                    }
                }
            }
            if (rank == 0) thread.execute { mpi.closePort(port) }
            val (r, n) = thread.execute { mpi.rankAndSize(world) }
            check(r == rank && n == size) { "the merged communicator has this process as rank $r of $n, but the store's rank is $rank of $size" }
            return world
        } finally {
            if (ownsThread) thread.close()
        }
    }

    /**
     * Runs a store step, naming its failure: a timeout is a [dev.tpcomm.CommunicationTimeoutException]
     * saying what this rank waited for (and [who] it waited on), a store that went away a
     * [dev.tpcomm.CommunicatorAbortedException] naming rank 0, which hosts it.
     */
    private suspend fun <T> step(what: String, who: Int? = null, connecting: Boolean = false, block: suspend () -> T): T = try {
        block()
    } catch (e: StoreConnectionException) {
        if (!connecting || rank == 0) throw creation.interrupted(
            "the job's store at $where, which rank 0 hosts, went away while $what: rank 0 died or ended before the world formed " +
                "(${e.message})",
            e,
        )
        // Never reached: rank 0 did not come (or is elsewhere) within the timeout.
        throw timedOut(what, who, e)
    } catch (e: StoreTimeoutException) {
        throw timedOut(what, who, e)
    }

    private fun timedOut(what: String, who: Int?, e: Exception): dev.tpcomm.CommunicationTimeoutException {
        val waited = ((System.nanoTime() - started) / 1_000_000).milliseconds
        return creation.timedOut(
            "the world formed through the store ($rendezvous, $where) did not form within ${creation.timeout} (CommConfig.creationTimeout): $what, after $waited" +
                (who?.let { "; rank $it never came (it did not start, is stuck, or died), or its store is elsewhere" } ?: "") +
                ". Every rank of the $size must run Comm.create with the same MASTER_ADDR/MASTER_PORT (${e.message})",
        )
    }

    companion object {
        /** The keys' prefix in the job's store. */
        const val PREFIX: String = "tpcomm/mpi/world"
        private const val SERVER_KEY = "ompi-server"
        private const val PORT_KEY = "port"
        private const val ARRIVED_KEY = "arrived"
        private const val JOINED_KEY = "joined"
        private const val ERROR_PREFIX = "error:"
        private const val ERROR_SEEN_KEY = "error-seen"

        /** Open MPI's MCA parameter `pmix_server_uri`, as an environment variable. */
        const val SERVER_URI_VARIABLE: String = "OMPI_MCA_pmix_server_uri"

        /** How long `ompi-server` may take to print its URI. */
        private const val SERVER_START_MILLIS = 30_000L

        /** The last formation's timing in this process (null before). */
        @Volatile var timing: MpiStoreWorldTiming? = null
            private set

        /** How much earlier than the creation's timeout the store steps give up: a tenth, at most 2 s. */
        fun margin(timeout: Duration): Duration = minOf(timeout / 10, Duration.parse("2s"))

        /**
         * The rendezvous through which MPI forms the world from the store, or null when it does not:
         * [CommConfig.rendezvous] `env://` or `tcp://host:port`, or none set and `MASTER_ADDR` (or
         * Kubeflow's `PET_MASTER_ADDR`) in [env], as for NCCL's `env://`.
         */
        fun rendezvous(config: CommConfig, env: Map<String, String>): String? {
            val r = config.rendezvous?.trim()?.takeIf { it.isNotEmpty() }
            return when {
                r != null && (r.startsWith("env:") || r.startsWith("tcp:")) -> r
                r == null && ("MASTER_ADDR" in env || "PET_MASTER_ADDR" in env) -> "env://"
                else -> null
            }
        }

        /**
         * Why [library] cannot form a world from the store, or null (Open MPI). MPICH 4.0's
         * `ch4:ucx` netmod has no dynamic processes: `MPIDI_UCX_get_local_upids`, which `MPID_Open_port`
         * calls (`src/mpid/ch4/src/ch4_spawn.c`), only sets `**ucx_nm_notsupported`
         * (`src/mpid/ch4/netmod/ucx/ucx_spawn.c`, v4.0.2 to v4.2.3; implemented from v4.3.0). The
         * other MPICH-ABI libraries (Intel MPI, MVAPICH) were not tried.
         */
        fun refusal(library: MpiLibrary): String? {
            if (!library.implementation.mpichAbi) return null
            val version = library.version.lineSequence().firstOrNull()?.trim().orEmpty()
            return "no MPI launcher started this process, and ${library.implementation} ($version, ${library.path}) cannot form a " +
                "world from the store: tpcomm joins singleton processes with MPI_Open_port, MPI_Comm_accept and MPI_Comm_connect, " +
                "which MPICH's ch4:ucx netmod does not implement before MPICH 4.3 (\"The function is currently not supported with " +
                "ucx netmod\"; the other MPICH-ABI libraries are untried). Launch the job with mpiexec/mpirun (or srun --mpi=pmix); " +
                "or use Open MPI (its libmpi.so.40, TPCOMM_MPI_LIBRARY, with ompi-server on rank 0's host), which forms the world " +
                "from MASTER_ADDR/MASTER_PORT; or, under torchrun or Kubernetes, \"nccl\"/\"rccl\" with env://"
        }
    }
}

/**
 * When each step of one process's world formation ([MpiStoreWorld]) ended, in milliseconds since
 * its `Comm.create` began: `store` (connected), `ompi-server` (URI known), `MPI_Init`, `joined`.
 */
internal data class MpiStoreWorldTiming(val rank: Int, val size: Int, val stepsMillis: Map<String, Long>)
