@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.rccl

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.Device
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.AllReduceSweep
import dev.tpcomm.gpu.BootstrapChannel
import dev.tpcomm.gpu.DeviceCopies
import dev.tpcomm.gpu.DeviceRuntime
import dev.tpcomm.gpu.NcclConnector
import dev.tpcomm.testkit.CaseResult
import dev.tpcomm.testkit.ConformanceOptions
import dev.tpcomm.testkit.ScratchCommunicatorFactory
import dev.tpcomm.testkit.SpmdConformanceRunner
import dev.tpcomm.testkit.TensorPlacement
import kotlin.system.exitProcess
import kotlinx.coroutines.runBlocking

/**
 * For `scripts/gpu-check.sh` and the GPU bundle (never run in CI: there is no GPU here). One
 * process per rank, rank and world from the environment, the unique id through `TPCOMM_RENDEZVOUS`.
 *
 * - `conformance` / `bench`: the comm-testkit cases, or an all-reduce sweep, on the `rccl` backend
 *   (RCCL and HIP, AMD GPUs).
 * - `conformance --nvidia` / `bench --nvidia`: the same `java.lang.foreign` binding of NCCL's C API
 *   ([RcclLibrary]) opened on NVIDIA's `libnccl.so.2` ([RcclLibrary.nvidia]) with the CUDA runtime
 *   through the same downcall code ([FfmDeviceRuntime.cuda]), on `Device.Cuda`: comm-rccl's binding
 *   checked on an NVIDIA GPU, beside comm-nccl's JavaCPP one.
 */
fun main(args: Array<String>) {
    val mode = args.firstOrNull() ?: "conformance"
    val nvidia = "--nvidia" in args
    val config = CommConfig.fromEnvironment()
    val open: suspend (CommConfig) -> Communicator
    val runtime: DeviceRuntime
    if (nvidia) {
        val platform = try {
            RcclLibrary.nvidia() to FfmDeviceRuntime.cuda()
        } catch (e: UnsatisfiedLinkError) {
            System.err.println("NCCL over java.lang.foreign is unavailable: ${e.message}")
            exitProcess(2)
        }
        val (api, cuda) = platform
        runtime = cuda
        println("== comm-rccl's binding on ${api.loadedFrom} and ${cuda.loadedFrom}")
        open = { c ->
            val (channel, owned) = BootstrapChannel.fromConfig(c, null)
            NcclConnector.connect(api, cuda, Device.Cuda(c.localRank), c, channel, "nccl-ffm", onClose = owned)
        }
    } else {
        val factory = RcclBackendFactory()
        if (!factory.isAvailable()) {
            System.err.println("rccl is unavailable: ${factory.unavailableReason()}")
            exitProcess(2)
        }
        runtime = HipRuntime()
        open = { c -> Comm.create("rccl", c) }
    }
    val code = runBlocking {
        val comm = open(config)
        val copies = DeviceCopies(runtime, comm.device)
        try {
            if (mode == "bench") bench(comm, copies, if (nvidia) "tpcomm-ffm" else "tpcomm-rccl") else conformance(comm, copies, config, open)
        } finally {
            comm.close()
        }
    }
    exitProcess(code)
}

private suspend fun conformance(
    comm: Communicator,
    copies: DeviceCopies,
    config: CommConfig,
    open: suspend (CommConfig) -> Communicator,
): Int {
    val options = ConformanceOptions(
        ops = setOf(ReduceOp.Sum, ReduceOp.Product, ReduceOp.Min, ReduceOp.Max, ReduceOp.Avg),
        pointToPoint = true, // the tag-0 ring; the tag, ANY_SOURCE and probe cases are skipped
        taggedPointToPoint = false,
        groups = false,
        checksConsistency = false,
        placement = object : TensorPlacement {
            override fun toBackend(host: Tensor): Tensor = copies.upload(host)
            override fun toHost(tensor: Tensor): Tensor = copies.download(tensor)
        },
    )
    val scratch = ScratchCommunicatorFactory { _, timeout -> open(config.copy(timeout = timeout)) }
    val results = SpmdConformanceRunner.run(comm, options = options, scratch = scratch, report = { r ->
        println("rank ${r.rank}: ${r.status} ${r.case}" + (r.message?.let { " — $it" } ?: ""))
    })
    val failed = results.count { it.status == CaseResult.Status.Failed }
    println("rank ${comm.rank}: ${results.count { it.status == CaseResult.Status.Passed }} passed, $failed failed, ${results.count { it.status == CaseResult.Status.Skipped }} skipped")
    return if (failed == 0) 0 else 1
}

private suspend fun bench(comm: Communicator, copies: DeviceCopies, impl: String): Int {
    AllReduceSweep.run(comm, copies, impl)
    return 0
}
