package dev.tpcomm.nccl

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.AllReduceSweep
import dev.tpcomm.gpu.DeviceCopies
import dev.tpcomm.nccl.javacpp.JavaCppPlatform
import dev.tpcomm.testkit.CaseResult
import dev.tpcomm.testkit.ConformanceOptions
import dev.tpcomm.testkit.ScratchCommunicatorFactory
import dev.tpcomm.testkit.SpmdConformanceRunner
import dev.tpcomm.testkit.TensorPlacement
import kotlin.system.exitProcess
import kotlinx.coroutines.runBlocking

/**
 * For `scripts/gpu-check.sh` on a machine with NVIDIA GPUs (never run in CI or on the build
 * machine): `conformance` runs the comm-testkit cases on the real NCCL backend, one process per
 * rank (rank and world from the environment, `TPCOMM_RENDEZVOUS` for the id); `bench` runs
 * [AllReduceSweep] (8 B to 256 MiB, the protocol shared with the C and PyTorch programs of
 * `scripts/gpu/`) as `tpcomm-javacpp`.
 */
fun main(args: Array<String>) {
    val mode = args.firstOrNull() ?: "conformance"
    val config = CommConfig.fromEnvironment()
    val factory = NcclBackendFactory()
    if (!factory.isAvailable()) {
        System.err.println("nccl is unavailable: ${factory.unavailableReason()}")
        exitProcess(2)
    }
    val code = runBlocking {
        val comm = factory.create(config)
        val copies = DeviceCopies(JavaCppPlatform.runtime(), comm.device)
        try {
            if (mode == "bench") bench(comm, copies) else conformance(comm, copies, config)
        } finally {
            comm.close()
        }
    }
    exitProcess(code)
}

internal suspend fun conformance(comm: Communicator, copies: DeviceCopies, config: CommConfig): Int {
    val options = ConformanceOptions(
        ops = setOf(ReduceOp.Sum, ReduceOp.Product, ReduceOp.Min, ReduceOp.Max, ReduceOp.Avg),
        pointToPoint = true,
        taggedPointToPoint = false,
        groups = false,
        checksConsistency = false,
        placement = object : TensorPlacement {
            override fun toBackend(host: Tensor): Tensor = copies.upload(host)
            override fun toHost(tensor: Tensor): Tensor = copies.download(tensor)
        },
    )
    val scratch = ScratchCommunicatorFactory { _, timeout -> Comm.create(comm.backendName, config.copy(timeout = timeout)) }
    val results = SpmdConformanceRunner.run(comm, options = options, scratch = scratch, report = { r ->
        println("rank ${r.rank}: ${r.status} ${r.case}" + (r.message?.let { " — $it" } ?: ""))
    })
    val failed = results.count { it.status == CaseResult.Status.Failed }
    println("rank ${comm.rank}: ${results.count { it.status == CaseResult.Status.Passed }} passed, $failed failed, ${results.count { it.status == CaseResult.Status.Skipped }} skipped")
    return if (failed == 0) 0 else 1
}

internal suspend fun bench(comm: Communicator, copies: DeviceCopies): Int {
    AllReduceSweep.run(comm, copies, impl = "tpcomm-javacpp")
    return 0
}
