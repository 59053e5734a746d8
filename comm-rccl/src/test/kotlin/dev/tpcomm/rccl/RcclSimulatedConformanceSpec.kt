package dev.tpcomm.rccl

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import dev.tpcomm.gpu.sim.SimulatedWorld
import dev.tpcomm.testkit.ConformanceOptions
import dev.tpcomm.testkit.ConformanceSpec
import dev.tpcomm.testkit.TensorPlacement
import dev.tpcomm.testkit.WorldLauncher

/** The engine as the rccl backend runs it (Device.Rocm, backend name rccl) on the simulated platform. */
private object RocmSimLauncher : WorldLauncher {
    val platform = SimulatedGpuPlatform(libraryName = "RCCL (simulated)", rejectSharedDevices = false, float8IsOcp = false)
    private val device = Device.Rocm(0)
    private val world = SimulatedWorld(platform, "rccl") { device }

    override suspend fun <R> run(worldSize: Int, config: CommConfig, block: suspend (Communicator) -> R): List<R> {
        val result = world.run(worldSize, config) { c ->
            check(c.device == device && c.backendName == "rccl")
            block(c)
        }
        platform.assertNoMisuse() // what RCCL would turn into a hang or corruption fails the case
        return result
    }

    val placement = object : TensorPlacement {
        override fun toBackend(host: Tensor): Tensor = platform.upload(host, device)
        override fun toHost(tensor: Tensor): Tensor = platform.download(tensor)
    }

    // As comm-nccl's run (see comm-gpu's SimulatedWorldLauncher for why p2p is off), smaller.
    val options = ConformanceOptions(
        dtypes = DType.entries.toSet(),
        // RCCL has no int16, and its FP8 types are FNUZ, not the OCP formats tpcomm's FP8 dtypes hold.
        reducedDtypes = DType.entries.toSet() - DType.Int16 - DType.Float8E4M3 - DType.Float8E5M2,
        ops = setOf(ReduceOp.Sum, ReduceOp.Product, ReduceOp.Min, ReduceOp.Max, ReduceOp.Avg),
        pointToPoint = true,
        taggedPointToPoint = false,
        checksConsistency = true,
        maxWorldSize = 3,
        worldSizes = listOf(2, 3),
        propertyIterations = 3,
        soakCollectives = 300,
        soakConcurrency = 8,
        soakWorldSize = 3,
        maxElements = 1_024,
        placement = placement,
    ).withSystemProperties()
}

class RcclSimulatedConformanceSpec : ConformanceSpec(RocmSimLauncher, RocmSimLauncher.options)
