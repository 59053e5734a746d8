package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.Device
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import dev.tpcomm.store.TcpStore
import dev.tpcomm.store.TcpStoreServer
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.types.shouldBeInstanceOf
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.coroutineScope
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/**
 * The GPU engine (on the simulated platform) bootstraps through the store: `env://` with
 * torchrun's variables (rank 0 hosts a TcpStoreServer on MASTER_PORT), `tcp://host:port`, and
 * torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE: nobody else hosts it, keys under
 * /worker/attempt_<n>).
 */
class StoreRendezvousSimTest : FunSpec({
    fun freePort() = java.net.ServerSocket(0).use { it.localPort }

    suspend fun world(platform: SimulatedGpuPlatform, n: Int, base: CommConfig, env: (Int) -> Map<String, String>): List<Communicator> = coroutineScope {
        (0 until n).map { r ->
            async(Dispatchers.Default) {
                val cfg = base.copy(rank = r, localRank = r)
                val (channel, owned) = BootstrapChannel.fromConfig(cfg, env = env(r))
                channel.shouldBeInstanceOf<StoreBootstrap>()
                NcclConnector.connect(platform.api, platform.runtime, Device.Cuda(r), cfg, channel, "nccl", onClose = owned)
            }
        }.awaitAll()
    }

    suspend fun allReduceSums(platform: SimulatedGpuPlatform, comms: List<Communicator>): List<Double> = coroutineScope {
        comms.map { c ->
            async(Dispatchers.Default) {
                val t = platform.upload(Tensor.of(doubleArrayOf(c.rank + 0.5)), c.device)
                c.allReduce(t)
                platform.download(t).toDoubleArray()[0]
            }
        }.awaitAll()
    }

    test("env:// with torchrun's variables and no rendezvous set: rank 0 hosts the store, the ids travel under PyTorch's keys") {
        val platform = SimulatedGpuPlatform()
        val port = freePort()
        val env = { r: Int -> mapOf("RANK" to "$r", "WORLD_SIZE" to "2", "MASTER_ADDR" to "127.0.0.1", "MASTER_PORT" to "$port") }
        val comms = world(platform, 2, CommConfig(worldSize = 2, timeout = 10.seconds), env)
        allReduceSums(platform, comms) shouldBe listOf(2.0, 2.0)
        TcpStore.connect("127.0.0.1", port, 5.seconds).use { s ->
            s.get("default_pg/0//cuda//0").size shouldBe NcclConnector.UNIQUE_ID_BYTES
        }
        comms.forEach { it.close() }
        platform.close()
    }

    test("tcp://host:port, twice on the same store (a second communicator takes the next key)") {
        val platform = SimulatedGpuPlatform()
        val port = freePort()
        val base = CommConfig(worldSize = 2, timeout = 10.seconds, rendezvous = "tcp://127.0.0.1:$port")
        repeat(2) {
            val comms = world(platform, 2, base) { emptyMap() }
            allReduceSums(platform, comms) shouldBe listOf(2.0, 2.0)
            comms.forEach { it.close() }
        }
        TcpStore.connect("127.0.0.1", port, 5.seconds).use { s -> s.check(listOf("default_pg/0//cuda//0", "default_pg/0//cuda//1")) shouldBe true }
        platform.close()
    }

    test("torchrun's agent store: no rank hosts one, keys live under /worker/attempt_<restart count>") {
        val platform = SimulatedGpuPlatform()
        TcpStoreServer.start(port = 0, host = "127.0.0.1").use { agent ->
            val env = { r: Int ->
                mapOf(
                    "RANK" to "$r", "WORLD_SIZE" to "2", "MASTER_ADDR" to "127.0.0.1", "MASTER_PORT" to "${agent.port}",
                    "TORCHELASTIC_USE_AGENT_STORE" to "True", "TORCHELASTIC_RESTART_COUNT" to "3",
                )
            }
            val comms = world(platform, 2, CommConfig(worldSize = 2, timeout = 10.seconds, rendezvous = "env://"), env)
            allReduceSums(platform, comms) shouldBe listOf(2.0, 2.0)
            TcpStore.connect("127.0.0.1", agent.port, 5.seconds).use { s ->
                s.check(listOf("/worker/attempt_3/default_pg/0//cuda//0")) shouldBe true
            }
            comms.forEach { it.close() }
        }
        platform.close()
    }

    test("a rank whose rank 0 never comes fails within the creation timeout, naming MASTER_ADDR and the store") {
        val port = freePort()
        TcpStoreServer.start(port = port, host = "127.0.0.1").use { // a store up, but no rank 0 publishing into it
            // The rendezvous is part of the creation: CommConfig.creationTimeout bounds it, not the operation timeout.
            val cfg = CommConfig(worldSize = 2, rank = 1, localRank = 1, timeout = 30.seconds, creationTimeout = 500.milliseconds, rendezvous = "tcp://127.0.0.1:$port")
            val start = System.nanoTime()
            val (channel, owned) = BootstrapChannel.fromConfig(cfg, env = emptyMap())
            val e = shouldThrow<IllegalStateException> { channel.shareUniqueId(1, null) }
            e.message shouldContain "MASTER_ADDR"
            ((System.nanoTime() - start) / 1_000_000 < 10_000) shouldBe true // its 0.5 s, not the 30 s operation timeout
            owned?.close()
        }
    }
})
