@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.rccl

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.Device
import dev.tpcomm.gpu.AllReduceSweep
import dev.tpcomm.gpu.BootstrapChannel
import dev.tpcomm.gpu.DeviceCopies
import dev.tpcomm.gpu.DeviceRuntime
import dev.tpcomm.gpu.GpuCheckConformance
import dev.tpcomm.gpu.NcclConnector
import dev.tpcomm.gpu.NcclVersion
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
 * - `bench ... --max-bytes N`: the sweep up to N bytes (default [AllReduceSweep.MAX_BYTES]).
 * - `version [--nvidia]`: prints `nccl version <code> (<x.y.z>) via ffm from <library>` (`ncclGetVersion`
 *   of the library this binding opens; RCCL reports the NCCL version it tracks) and exits 0, or
 *   `nccl version unknown: <why>` and exits 2. The GPU bundle reads it to choose the world (two ranks
 *   on one GPU need NCCL 2.30+).
 */
fun main(args: Array<String>) {
    val mode = args.firstOrNull() ?: "conformance"
    val nvidia = "--nvidia" in args
    if (mode == "version") {
        val api = try {
            if (nvidia) RcclLibrary.nvidia() else RcclLibrary()
        } catch (e: UnsatisfiedLinkError) {
            println("nccl version unknown: ${if (nvidia) "libnccl.so.2" else "librccl.so"} did not open: ${e.message}")
            exitProcess(2)
        }
        val v = IntArray(1)
        val rc = api.getVersion(v)
        if (rc != 0 || v[0] == 0) {
            println("nccl version unknown: ncclGetVersion returned $rc from ${api.loadedFrom}")
            exitProcess(2)
        }
        println("nccl version ${v[0]} (${NcclVersion.format(v[0])}) via ffm from ${api.loadedFrom}")
        exitProcess(0)
    }
    val maxBytes = args.indexOf("--max-bytes").takeIf { it >= 0 }?.let { args.getOrNull(it + 1)?.toLongOrNull() } ?: AllReduceSweep.MAX_BYTES
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
            if (mode == "bench") {
                val impl = if (nvidia) "tpcomm-ffm" else "tpcomm-rccl"
                if (comm.rank == 0) println("# $impl: world ${comm.worldSize}, rank 0 on ${comm.device}")
                AllReduceSweep.run(comm, copies, impl = impl, maxBytes = maxBytes)
                0
            } else {
                GpuCheckConformance.run(comm, copies) { _, timeout -> open(GpuCheckConformance.scratchConfig(config, timeout)) }
            }
        } finally {
            comm.close()
        }
    }
    exitProcess(code)
}
