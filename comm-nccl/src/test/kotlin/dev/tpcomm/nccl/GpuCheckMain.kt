package dev.tpcomm.nccl

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.gpu.AllReduceSweep
import dev.tpcomm.gpu.DeviceCopies
import dev.tpcomm.gpu.GpuCheckConformance
import dev.tpcomm.nccl.javacpp.JavaCppPlatform
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
            if (mode == "bench") {
                AllReduceSweep.run(comm, copies, impl = "tpcomm-javacpp")
                0
            } else {
                GpuCheckConformance.run(comm, copies) { _, timeout -> Comm.create(comm.backendName, config.copy(timeout = timeout)) }
            }
        } finally {
            comm.close()
        }
    }
    exitProcess(code)
}
