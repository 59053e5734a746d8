@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationTimeoutException
import dev.tpcomm.Device
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.sim.InMemoryBootstrap
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import dev.tpcomm.gpu.sim.SimulatedNccl
import dev.tpcomm.gpu.sim.SimulatedWorld
import dev.tpcomm.spi.CommunicationErrors
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldBeEmpty
import io.kotest.matchers.longs.shouldBeGreaterThanOrEqual
import io.kotest.matchers.longs.shouldBeLessThan
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.types.shouldBeInstanceOf
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.delay
import kotlinx.coroutines.withContext
import kotlin.time.Duration
import kotlin.time.Duration.Companion.milliseconds
import kotlin.time.Duration.Companion.seconds

/**
 * Creating a GPU communicator (`ncclCommInitRankConfig` joining every rank, and `ncclCommSplit`)
 * is bounded by `CommConfig.creationTimeout`, not by the operation timeout: the simulator's init
 * stays `ncclInProgress` until every rank of the unique id called it, as NCCL's bootstrap waits for
 * every rank (NVIDIA/nccl `src/init.cc` `ncclCommInitRankFunc` → `initTransportsRank` →
 * `bootstrapAllGather`; `src/bootstrap.cc` `bootstrapInit`).
 */
class CreationDeadlineSpec : FunSpec({
    fun ints(vararg v: Int) = Tensor.of(v)

    suspend fun connect(platform: SimulatedGpuPlatform, config: CommConfig, rank: Int, bootstrap: InMemoryBootstrap): NcclCommunicator =
        NcclConnector.connect(
            platform.api, platform.runtime, Device.Cuda(rank), config.copy(rank = rank, localRank = rank),
            bootstrap, "nccl", NcclCommConfig(), null, DeviceThreads(),
        )

    test("an init whose peer joins after the operation timeout but within the creation timeout creates the world") {
        val platform = SimulatedGpuPlatform()
        val config = CommConfig(worldSize = 2, timeout = 300.milliseconds, creationTimeout = 10.seconds)
        withContext(Dispatchers.Default) {
            val bootstrap = InMemoryBootstrap()
            val r0 = async { connect(platform, config, 0, bootstrap) }
            delay(1_500) // five operation timeouts late
            val c1 = connect(platform, config, 1, bootstrap)
            val c0 = r0.await()
            val sums = listOf(c0, c1).map { c -> async { platform.download(c.allReduce(platform.upload(ints(c.rank + 1), Device.Cuda(c.rank)))).toIntArray().single() } }.awaitAll()
            sums shouldBe listOf(3, 3)
            c0.close(); c1.close()
        }
        platform.assertNoMisuse()
    }

    test("an init a rank never joins fails past the creation timeout with CommunicationTimeoutException on every waiting rank, and leaves no communicator") {
        val platform = SimulatedGpuPlatform()
        val config = CommConfig(worldSize = 3, timeout = 30.seconds, creationTimeout = 1.seconds)
        val outcomes = withContext(Dispatchers.Default) {
            val bootstrap = InMemoryBootstrap()
            (0..1).map { r ->
                async {
                    val start = System.nanoTime()
                    runCatching { connect(platform, config, r, bootstrap) }.exceptionOrNull() to (System.nanoTime() - start) / 1_000_000
                }
            }.awaitAll() // rank 2 never comes
        }
        for ((e, ms) in outcomes) {
            e.shouldBeInstanceOf<CommunicationTimeoutException>()
            e.operation shouldBe CommunicationErrors.CREATE
            e.message!! shouldContain "creationTimeout"
            ms shouldBeGreaterThanOrEqual 1_000
            ms shouldBeLessThan 3_000
        }
        (platform.api as SimulatedNccl).liveComms.shouldBeEmpty()
        platform.assertNoMisuse()
    }

    test("a split whose peer arrives after the operation timeout but within the creation timeout succeeds; past it, every waiting rank gets CommunicationTimeoutException") {
        val platform = SimulatedGpuPlatform()
        withContext(Dispatchers.Default) {
            val comms = SimulatedWorld(platform).connect(CommConfig(worldSize = 2, timeout = 300.milliseconds, creationTimeout = 10.seconds))
            val s0 = async { comms[0].split(color = 0, key = 0) }
            delay(1_500)
            val s1 = comms[1].split(color = 0, key = 1)!!
            val c0 = s0.await()!!
            listOf(c0, s1).forEach { it.worldSize shouldBe 2; it.close() }
            comms.forEach { it.close() }
        }
        withContext(Dispatchers.Default) {
            val comms = SimulatedWorld(platform).connect(CommConfig(worldSize = 3, timeout = 30.seconds, creationTimeout = 1.seconds))
            val outcomes = (0..1).map { r ->
                async {
                    val start = System.nanoTime()
                    runCatching { comms[r].split(color = 0, key = r) }.exceptionOrNull() to (System.nanoTime() - start) / 1_000_000
                }
            }.awaitAll() // rank 2 never splits
            for ((e, ms) in outcomes) {
                e.shouldBeInstanceOf<CommunicationTimeoutException>()
                e.operation shouldBe "split"
                ms shouldBeGreaterThanOrEqual 1_000
                ms shouldBeLessThan 3_000
            }
            comms.forEach { it.close() }
        }
        (platform.api as SimulatedNccl).liveComms.shouldBeEmpty()
        platform.assertNoMisuse()
    }
})
