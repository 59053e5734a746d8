package dev.tpcomm.store

import java.net.InetAddress
import java.net.NetworkInterface
import java.net.URI
import java.util.concurrent.ConcurrentHashMap
import kotlin.time.Duration

/**
 * The `env://` and `tcp://host:port` rendezvous of `torch.distributed`, for tpcomm's processes:
 * rank 0 hosts a [TcpStoreServer] (unless torchrun's agent already hosts the store), every rank
 * connects a [TcpStore] to it.
 *
 * - `env://` reads `MASTER_ADDR` and `MASTER_PORT` (default 29500), or Kubeflow's
 *   `PET_MASTER_ADDR`/`PET_MASTER_PORT`, as PyTorch's `_env_rendezvous_handler` reads the first two.
 *   Under torchrun with `TORCHELASTIC_USE_AGENT_STORE=True` the agent hosts the store on
 *   `MASTER_ADDR:MASTER_PORT`: no rank hosts one, and the keys live under
 *   `/worker/attempt_<TORCHELASTIC_RESTART_COUNT>`, the prefix PyTorch's workers use there
 *   (`torch/distributed/rendezvous.py`, `_create_c10d_store`: `PrefixStore(f"/worker/attempt_{attempt}",
 *   tcp_store)`; otherwise `TCPStore(..., is_master = rank == 0)`, rank 0 hosting). PyTorch's Python
 *   side takes the agent store only for the value `True`; this also takes `true` and `1`.
 * - `tcp://host:port`: rank 0 hosts the store on that port, every rank connects to host:port.
 *
 * Rank 0's server binds the interface that the address names when it is one of this host's (so a
 * job on a private network does not listen on every interface), and every interface otherwise
 * (`MASTER_ADDR` may name a Kubernetes service that forwards to the pod). It lives as long as this
 * process (one server per port, shared by every communicator that uses it), as PyTorch's store
 * lives as long as its default process group.
 */
public object StoreRendezvous {
    private val servers = ConcurrentHashMap<Int, TcpStoreServer>()

    /**
     * The address ([rendezvous], [env]) of the store, and whether this rank must host it.
     *
     * @throws IllegalArgumentException when [rendezvous] is neither `env://` nor `tcp://host:port`,
     * or `env://` finds no `MASTER_ADDR`, naming what to set.
     */
    @JvmStatic
    @JvmOverloads
    public fun address(rendezvous: String, env: Map<String, String> = System.getenv()): Address {
        val r = rendezvous.trim()
        if (r == "env://" || r == "env:") {
            val host = env["MASTER_ADDR"] ?: env["PET_MASTER_ADDR"]
                ?: throw IllegalArgumentException(
                    "rendezvous env:// needs MASTER_ADDR (and MASTER_PORT, default ${StoreProtocol.DEFAULT_PORT}): the host of rank 0, " +
                        "as torchrun sets them; or use tcp://host:port",
                )
            val portText = env["MASTER_PORT"] ?: env["PET_MASTER_PORT"] ?: StoreProtocol.DEFAULT_PORT.toString()
            val port = portText.trim().toIntOrNull()?.takeIf { it in 1..65535 }
                ?: throw IllegalArgumentException("MASTER_PORT=\"$portText\" is not a port number (1..65535)")
            val agent = env["TORCHELASTIC_USE_AGENT_STORE"]?.trim()?.lowercase() in setOf("true", "1")
            val prefix = if (agent) "/worker/attempt_${env["TORCHELASTIC_RESTART_COUNT"]?.trim() ?: "0"}" else null
            return Address(host.trim(), port, hostedByAgent = agent, prefix = prefix)
        }
        if (r.startsWith("tcp://")) {
            val uri = runCatching { URI(r) }.getOrNull()
            require(uri != null && uri.host != null && uri.port in 1..65535) {
                "rendezvous '$rendezvous' is not tcp://host:port (a host name or address, and a port in 1..65535)"
            }
            return Address(uri.host, uri.port, hostedByAgent = false, prefix = null)
        }
        throw IllegalArgumentException("rendezvous '$rendezvous' is neither env:// nor tcp://host:port")
    }

    /**
     * Connects this rank to the job's store: rank 0 first starts the server (unless
     * [Address.hostedByAgent]), then every rank connects, retrying until [timeout] while the
     * server is not up. The returned store is this rank's own connection (close it when done; the
     * server stays up); under the agent's store it is the view under [Address.prefix].
     *
     * @throws StoreException when rank 0 cannot listen on the port (taken), or no server answered
     * within [timeout].
     */
    public suspend fun connect(address: Address, rank: Int, timeout: Duration): Store {
        if (rank == 0 && !address.hostedByAgent) host(address)
        val store = TcpStore.connect(address.host, address.port, timeout)
        return address.prefix?.let { store.withPrefixOwning(it) } ?: store
    }

    private fun host(address: Address) {
        servers.compute(address.port) { _, running ->
            if (running != null && running.isRunning) running else TcpStoreServer.start(address.port, bindHost(address.host))
        }
    }

    /**
     * [host] itself when it names a non-loopback interface of this machine, or is written as a
     * loopback address (`127.0.0.1`, `::1`, `localhost`: a job on one host); else null (every
     * interface). A host *name* that resolves to loopback here (Debian maps the machine's own name to
     * 127.0.1.1) gets every interface, since the other hosts resolve it to the real address.
     */
    internal fun bindHost(host: String): String? = runCatching {
        val a = InetAddress.getByName(host)
        when {
            a.isLoopbackAddress -> host.takeIf { it == "localhost" || it.first().isDigit() || ':' in it }
            NetworkInterface.getByInetAddress(a) != null -> host
            else -> null
        }
    }.getOrNull()

    /**
     * Where a job's store is.
     *
     * @property host the server's host name or address.
     * @property port the server's port.
     * @property hostedByAgent true when torchrun's agent hosts the store (`TORCHELASTIC_USE_AGENT_STORE`).
     * @property prefix the key prefix the job's workers use (under the agent's store), or null.
     */
    public data class Address(
        public val host: String,
        public val port: Int,
        public val hostedByAgent: Boolean,
        public val prefix: String?,
    )

    /** A prefix view that closes [this] when closed (the view owns the connection). */
    private fun TcpStore.withPrefixOwning(prefix: String): Store {
        val inner = this
        val view = PrefixStore(inner, prefix)
        return object : Store by view {
            override fun close() = inner.close()
            override fun toString(): String = view.toString()
        }
    }
}
