package dev.tpcomm.gpu.sim

import dev.tpcomm.CommConfig
import dev.tpcomm.Device
import dev.tpcomm.gpu.NcclCommunicator
import dev.tpcomm.gpu.DeviceThreads
import dev.tpcomm.gpu.NcclCommConfig
import dev.tpcomm.gpu.NcclConnector
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.joinAll
import kotlinx.coroutines.supervisorScope
import kotlinx.coroutines.withContext

/**
 * **A testing aid**: worlds of [NcclCommunicator]s on a [SimulatedGpuPlatform], every rank in this
 * JVM on its own simulated device (rank `r` on device `r`). The communicators are the real engine;
 * only the library and runtime under it are simulated. Thread-safe.
 *
 * @property device the device of a rank: `Device.Cuda(rank)` by default, `Device.Rocm(rank)` to
 * exercise the engine as the rccl backend uses it.
 */
public class SimulatedWorld @JvmOverloads constructor(
    public val platform: SimulatedGpuPlatform,
    public val backendName: String = "nccl",
    public val device: (Int) -> Device = { Device.Cuda(it) },
) {
    /** Creates all ranks of a world of `config.worldSize` concurrently and returns them in rank order. */
    public suspend fun connect(config: CommConfig): List<NcclCommunicator> = withContext(Dispatchers.Default) {
        val bootstrap = InMemoryBootstrap()
        // Each rank stands for a process. With a device per rank, the process-wide registry gives each
        // device (so each rank) its one native thread, and a second world on the same devices shares
        // them, as in a real process; ranks that share a device get a registry ("process") each.
        val devices = (0 until config.worldSize).map { device(it) }
        val shared = devices.toSet().size != devices.size
        val attempts = (0 until config.worldSize).map { r ->
            async {
                runCatching {
                    NcclConnector.connect(
                        platform.api, platform.runtime, device(r),
                        config.copy(rank = r, localRank = r), bootstrap, backendName,
                        NcclCommConfig(), null, if (shared) DeviceThreads() else DeviceThreads.PROCESS,
                    )
                }
            }
        }.awaitAll()
        // The root cause first: a rank that failed outright makes the others wait until their deadline.
        val failed = attempts.firstOrNull { it.isFailure && it.exceptionOrNull() !is dev.tpcomm.CommunicationTimeoutException }
            ?: attempts.firstOrNull { it.isFailure }
        if (failed != null) {
            attempts.forEach { a -> a.getOrNull()?.close() }
            throw failed.exceptionOrNull()!!
        }
        attempts.map { it.getOrThrow() }
    }

    /**
     * Runs [block] on every rank of a new world concurrently and returns the results in rank order;
     * closes the world afterwards. A block's exception is rethrown after every rank has ended.
     */
    public suspend fun <R> run(worldSize: Int, config: CommConfig, block: suspend (NcclCommunicator) -> R): List<R> {
        val comms = connect(config.copy(worldSize = worldSize, rank = 0, localRank = 0))
        try {
            val results = supervisorScope {
                val jobs = comms.map { c -> async(Dispatchers.Default) { block(c) } }
                jobs.joinAll()
                jobs.map { j -> runCatching { j.await() } }
            }
            // The root cause first: one rank's own exception makes the others fail with a CommunicationException later.
            (results.firstOrNull { it.isFailure && it.exceptionOrNull() !is dev.tpcomm.CommunicationException } ?: results.firstOrNull { it.isFailure })
                ?.let { throw it.exceptionOrNull()!! }
            return results.map { it.getOrThrow() }
        } finally {
            comms.forEach { runCatching { it.close() } }
        }
    }
}
