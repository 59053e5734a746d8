package dev.tpcomm.gpu

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.Tensor
import dev.tpcomm.store.Store
import dev.tpcomm.store.StoreRendezvous
import dev.tpcomm.store.StoreTimeoutException
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import java.net.URI
import java.nio.file.Path
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.TimeoutException
import java.util.concurrent.atomic.AtomicLong
import kotlin.time.Duration

/**
 * How rank 0's `ncclUniqueId` (128 bytes) reaches the other ranks before the NCCL communicator
 * exists. Implementations: [CommunicatorBootstrap] (any host-tensor communicator, e.g. MPI),
 * [StoreBootstrap] (a store that speaks PyTorch's TCPStore protocol: `env://`, `tcp://`) and
 * [FileStoreBootstrap]; [BootstrapChannel.fromConfig] picks one from [CommConfig.rendezvous].
 */
public fun interface BootstrapChannel {
    /**
     * Collective: rank 0 passes its id, the others pass null; every rank returns rank 0's id.
     * Cancellable; fails with an exception naming what to check when rank 0 never delivers.
     */
    public suspend fun shareUniqueId(rank: Int, id: ByteArray?): ByteArray

    public companion object {
        /**
         * The channel [CommConfig.rendezvous] names:
         * - `"mpi"`: a broadcast over [existing] if given, else over a communicator created with
         *   `Comm.create("mpi", config)` (comm-mpi must be on the classpath; the job launched by `mpirun`);
         * - `"file:///shared/path"`: a [FileStore] at that path;
         * - `"env://"`: the store at `MASTER_ADDR:MASTER_PORT` (torchrun's, Kubeflow's `PET_MASTER_*`),
         *   hosted by rank 0, or by torchrun's agent under `TORCHELASTIC_USE_AGENT_STORE`
         *   ([StoreRendezvous]); `"tcp://host:port"`: the store rank 0 hosts on that port;
         * - null: `"mpi"` when an MPI launcher's variables are set (`OMPI_COMM_WORLD_SIZE`, `PMI_SIZE`),
         *   [existing] when given, nothing needed for a world of one, `"env://"` when `MASTER_ADDR`
         *   (or `PET_MASTER_ADDR`) is set; otherwise an [IllegalArgumentException] saying what to set.
         *
         * The returned pair's second element is a communicator this function created and the caller
         * should close when done with it (null otherwise).
         */
        @JvmStatic
        public suspend fun fromConfig(
            config: CommConfig,
            existing: Communicator? = null,
            env: Map<String, String> = System.getenv(),
        ): Pair<BootstrapChannel, AutoCloseable?> {
            val rendezvous = config.rendezvous?.trim()?.takeIf { it.isNotEmpty() }
            return when {
                rendezvous == null && existing != null -> CommunicatorBootstrap(existing) to null
                rendezvous == null && config.worldSize == 1 -> BootstrapChannel { _, id -> id ?: error("world of one: rank 0 has the id") } to null
                rendezvous == "mpi" || (rendezvous == null && ("OMPI_COMM_WORLD_SIZE" in env || "PMI_SIZE" in env)) -> {
                    if (existing != null) {
                        CommunicatorBootstrap(existing) to null
                    } else {
                        val mpi = Comm.create("mpi", config.copy(rendezvous = null))
                        CommunicatorBootstrap(mpi) to mpi
                    }
                }
                rendezvous != null && rendezvous.startsWith("file:") -> {
                    val path = runCatching { Path.of(URI(rendezvous)) }.getOrElse {
                        throw IllegalArgumentException("rendezvous '$rendezvous' is not a file URI; use file:///absolute/path/on/a/shared/filesystem", it)
                    }
                    FileStoreBootstrap(FileStore(path), config.worldSize, config.effectiveCreationTimeout) to null
                }
                rendezvous != null && (rendezvous.startsWith("env:") || rendezvous.startsWith("tcp:")) ||
                    (rendezvous == null && ("MASTER_ADDR" in env || "PET_MASTER_ADDR" in env)) -> {
                    val address = StoreRendezvous.address(rendezvous ?: "env://", env)
                    val store = StoreRendezvous.connect(address, config.rank, config.effectiveCreationTimeout)
                    StoreBootstrap(store, config.worldSize, config.effectiveCreationTimeout) to store
                }
                rendezvous == null -> throw IllegalArgumentException(
                    "a world of ${config.worldSize} ranks needs a rendezvous to share NCCL's unique id: set CommConfig.rendezvous " +
                        "(or TPCOMM_RENDEZVOUS) to \"mpi\" when launched by mpirun with comm-mpi on the classpath, to \"env://\" " +
                        "under torchrun or Kubernetes (MASTER_ADDR, MASTER_PORT), to \"tcp://host-of-rank-0:port\", or to " +
                        "\"file:///path/on/a/shared/filesystem\" (a fresh path per job)",
                )
                else -> throw IllegalArgumentException("unknown rendezvous '$rendezvous'; use \"mpi\", \"env://\", \"tcp://host:port\" or \"file:///path\"")
            }
        }
    }
}

/**
 * Shares the id with a [Communicator.broadcast] of a 128-byte host tensor from rank 0 over [comm],
 * an existing communicator of the same ranks in the same order (from any backend, e.g. MPI). This
 * is how the MPI rendezvous works without comm-nccl depending on comm-mpi.
 */
public class CommunicatorBootstrap(private val comm: Communicator) : BootstrapChannel {
    override suspend fun shareUniqueId(rank: Int, id: ByteArray?): ByteArray {
        require(comm.device == Device.Host) { "the bootstrap communicator must move host tensors; ${comm.backendName} uses ${comm.device}" }
        require(comm.rank == rank) { "the bootstrap communicator's rank ${comm.rank} differs from this rank $rank; give a communicator of the same ranks in the same order" }
        val t = Tensor.zeros(DType.UInt8, NcclConnector.UNIQUE_ID_BYTES)
        if (rank == 0) MemorySegment.copy(requireNotNull(id), 0, t.segment, ValueLayout.JAVA_BYTE, 0, id.size)
        comm.broadcast(t, 0)
        return t.segment.toArray(ValueLayout.JAVA_BYTE)
    }
}

/**
 * Shares the id through a [FileStore]: rank 0 writes it under `tpcomm/nccl/uniqueId/<n>`, the
 * others wait for that key (up to [timeout]). `n` counts the communicators this rank created with
 * this store's path, so one job may create several in sequence.
 */
public class FileStoreBootstrap(
    private val store: FileStore,
    private val worldSize: Int,
    private val timeout: Duration,
) : BootstrapChannel {
    override suspend fun shareUniqueId(rank: Int, id: ByteArray?): ByteArray {
        val generation = GENERATIONS.computeIfAbsent("${store.path.toAbsolutePath()}#$rank") { AtomicLong() }.getAndIncrement()
        val key = "tpcomm/nccl/uniqueId/$generation"
        if (rank == 0) {
            check(store.get(key) == null) {
                "the rendezvous file ${store.path} already holds '$key' from an earlier job; delete it or use a fresh path"
            }
            store.set(key, requireNotNull(id))
            return id
        }
        return try {
            store.await(key, timeout)
        } catch (e: TimeoutException) {
            throw IllegalStateException("rank $rank of $worldSize: ${e.message}", e)
        }
    }

    private companion object {
        val GENERATIONS = ConcurrentHashMap<String, AtomicLong>()
    }
}

/**
 * Shares the id through a [Store] (PyTorch's TCPStore protocol: [StoreRendezvous]'s `env://` and
 * `tcp://`), under the key layout of PyTorch's default process group: rank 0 sets the `n`-th
 * communicator's id under `default_pg/0//cuda//<n>` (the first one is the key the check of
 * PyTorch 2.10 found, `/default_pg/0//cuda//0` on the wire), the others wait for it up to
 * [timeout]. `n` counts the communicators this rank created through this store's address, so a
 * job may create several (splits, groups) in the same order on every rank.
 */
public class StoreBootstrap(
    private val store: Store,
    private val worldSize: Int,
    private val timeout: Duration,
) : BootstrapChannel {
    override suspend fun shareUniqueId(rank: Int, id: ByteArray?): ByteArray {
        val generation = GENERATIONS.computeIfAbsent("$store#$rank") { AtomicLong() }.getAndIncrement()
        val key = "default_pg/0//cuda//$generation"
        if (rank == 0) {
            store.set(key, requireNotNull(id))
            return id
        }
        return try {
            store.get(key, timeout)
        } catch (e: StoreTimeoutException) {
            throw IllegalStateException(
                "rank $rank of $worldSize: rank 0 did not publish NCCL's unique id under '$key' in $store within $timeout; " +
                    "check that rank 0 started and that every rank uses the same MASTER_ADDR and MASTER_PORT",
                e,
            )
        }
    }

    private companion object {
        val GENERATIONS = ConcurrentHashMap<String, AtomicLong>()
    }
}
