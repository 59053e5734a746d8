package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import dev.tpcomm.gpu.sim.SimulatedWorld
import dev.tpcomm.testkit.ConformanceOptions
import dev.tpcomm.testkit.TensorPlacement
import dev.tpcomm.testkit.WorldLauncher

/**
 * Runs the conformance suite's worlds on the real engine over the simulated platform. Every rank
 * uses simulated device 0 (the suite's [TensorPlacement] cannot tell which rank a tensor is for), so
 * the platform is created with `rejectSharedDevices = false`; the data still lives in separate
 * simulated allocations per tensor.
 */
class SimulatedWorldLauncher(
    val platform: SimulatedGpuPlatform = SimulatedGpuPlatform(rejectSharedDevices = false),
    val device: Device = Device.Cuda(0),
    backendName: String = "nccl",
) : WorldLauncher {
    private val world = SimulatedWorld(platform, backendName) { device }

    /** Runs the world; then fails if the platform recorded misuse NCCL would turn into a hang or corruption. */
    override suspend fun <R> run(worldSize: Int, config: CommConfig, block: suspend (Communicator) -> R): List<R> {
        val result = world.run(worldSize, config) { block(it) }
        platform.assertNoMisuse()
        return result
    }

    /** Host tensors to simulated device memory and back, bit for bit. */
    val placement: TensorPlacement = object : TensorPlacement {
        override fun toBackend(host: Tensor): Tensor = platform.upload(host, device)
        override fun toHost(tensor: Tensor): Tensor = platform.download(tensor)
    }

    /**
     * What NCCL does: every dtype moved, every dtype but Int16 reduced (NCCL has no int16; FP8 since
     * 2.24, the simulated version is 2.30.7), no bitwise ops (they must be refused with IllegalArgumentException).
     * Point-to-point is tested in [NcclEngineSimTest] instead: the suite's cases use tags, ANY_SOURCE
     * and probe, which NCCL cannot provide. Mismatches are detected with checkConsistency (a signature all-gather).
     */
    fun options(): ConformanceOptions = ConformanceOptions(
        dtypes = DType.entries.toSet(),
        reducedDtypes = DType.entries.toSet() - DType.Int16,
        ops = setOf(ReduceOp.Sum, ReduceOp.Product, ReduceOp.Min, ReduceOp.Max, ReduceOp.Avg),
        pointToPoint = true,
        taggedPointToPoint = false,
        checksConsistency = true,
        maxWorldSize = 4,
        worldSizes = listOf(1, 2, 3, 4),
        propertyIterations = 6,
        soakCollectives = 1_500,
        soakConcurrency = 16,
        maxElements = 4_096,
        placement = placement,
    ).withSystemProperties()
}
