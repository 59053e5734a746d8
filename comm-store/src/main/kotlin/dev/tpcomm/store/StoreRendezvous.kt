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
 *
 * An opt-in shared secret ([SECRET_VARIABLE], [SECRET_FILE_VARIABLE]: [secret]) makes rank 0's
 * server serve only the ranks that prove it (jobs of tpcomm ranks only: PyTorch's store has none).
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
     * server stays up); under the agent's store it is the view under [Address.prefix]. [secret]
     * (by default [secret] of the environment): rank 0's server asks it of every client, and this
     * rank proves it.
     *
     * @throws StoreException when rank 0 cannot listen on the port (taken), or no server answered
     * within [timeout] (also when the server's secret is not this rank's).
     * @throws IllegalArgumentException when a secret is set but torchrun's agent hosts the store.
     */
    @JvmOverloads
    public suspend fun connect(address: Address, rank: Int, timeout: Duration, secret: ByteArray? = secret()): Store {
        require(secret == null || !address.hostedByAgent) {
            "a store secret is set ($SECRET_VARIABLE or $SECRET_FILE_VARIABLE), but torchrun's agent hosts the store " +
                "(TORCHELASTIC_USE_AGENT_STORE), and PyTorch's store has no secret: unset the secret, or run without the agent's store"
        }
        if (rank == 0 && !address.hostedByAgent) host(address, secret)
        val store = TcpStore.connect(address.host, address.port, timeout, secret)
        return address.prefix?.let { store.withPrefixOwning(it) } ?: store
    }

    private fun host(address: Address, secret: ByteArray?) {
        servers.compute(address.port) { _, running ->
            if (running != null && running.isRunning) running else TcpStoreServer.start(address.port, bindHost(address.host), secret = secret)
        }
    }

    /** The variable holding the job's store secret (its UTF-8 bytes); opt-in, for jobs of tpcomm ranks only. */
    public const val SECRET_VARIABLE: String = "TPCOMM_STORE_SECRET"

    /** The variable naming a file that holds the secret (e.g. a mounted Kubernetes secret); a final newline is not part of it. */
    public const val SECRET_FILE_VARIABLE: String = "TPCOMM_STORE_SECRET_FILE"

    /**
     * The job's store secret from [env]: [SECRET_VARIABLE]'s UTF-8 bytes, or the contents of the
     * file [SECRET_FILE_VARIABLE] names (without a final newline); null when neither is set.
     * Every rank must have the same one: rank 0's [TcpStoreServer] then serves only clients that
     * prove it, and PyTorch's clients (which have none) cannot join.
     *
     * @throws IllegalArgumentException when the value is empty or the file cannot be read, naming it.
     */
    @JvmStatic
    @JvmOverloads
    public fun secret(env: Map<String, String> = System.getenv()): ByteArray? {
        env[SECRET_VARIABLE]?.let { v ->
            require(v.isNotEmpty()) { "$SECRET_VARIABLE is set but empty; give the job's shared secret, or unset it" }
            return v.toByteArray(Charsets.UTF_8)
        }
        val path = env[SECRET_FILE_VARIABLE]?.takeIf { it.isNotBlank() } ?: return null
        val bytes = try {
            java.nio.file.Files.readAllBytes(java.nio.file.Path.of(path))
        } catch (e: java.io.IOException) {
            throw IllegalArgumentException("$SECRET_FILE_VARIABLE=$path cannot be read (${e.message}); name a readable file holding the job's secret", e)
        }
        var n = bytes.size
        while (n > 0 && (bytes[n - 1] == '\n'.code.toByte() || bytes[n - 1] == '\r'.code.toByte())) n--
        require(n > 0) { "$SECRET_FILE_VARIABLE=$path is empty; put the job's shared secret in it" }
        return bytes.copyOf(n)
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
