package dev.tpcomm.nccl

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.gpu.AllReduceLatency
import dev.tpcomm.gpu.AllReduceSweep
import dev.tpcomm.gpu.DeviceCopies
import dev.tpcomm.gpu.GpuCheckConformance
import dev.tpcomm.gpu.GpuProbe
import dev.tpcomm.nccl.javacpp.JavaCppPlatform
import kotlin.system.exitProcess
import kotlinx.coroutines.runBlocking

/**
 * For `scripts/gpu-check.sh` and the GPU bundle on a machine with NVIDIA GPUs (never run in CI or
 * on the build machine), one process per rank (rank and world from the environment,
 * `TPCOMM_RENDEZVOUS` for the id):
 *
 * - `conformance` runs the comm-testkit cases ([GpuCheckConformance]) on the real NCCL backend;
 * - `bench [--max-bytes N]` runs [AllReduceSweep] (8 B to 256 MiB by default, the protocol shared
 *   with the C and PyTorch programs of `scripts/gpu/`) as `tpcomm-javacpp`;
 * - `latency` runs [AllReduceLatency] (200,000 awaited 8-byte all-reduces in blocks of 10,000: a
 *   fresh JVM's first calls beside its steady state) as `tpcomm-javacpp`;
 * - `mpi-staging` runs [CudaStagingCheck] under `mpirun` (the MPI backend staging CUDA tensors
 *   through the real CUDA runtime) and exits 1 when a case failed;
 * - `allocations` runs [JavaCppAllocationsCheck] (issue 35 finding 7: nothing in an init, a split or
 *   `ncclGetUniqueId` allocates through JavaCPP's accounting) and exits 1 when a check failed;
 * - `version` prints `nccl version <code> (<x.y.z>) via javacpp, <n> device(s)` and exits 0, or
 *   `nccl version unknown: <why>` and exits 2: the bundle reads it to choose the world (two ranks on
 *   one GPU need NCCL 2.30+).
 *
 * Exit status 2 when NCCL is unavailable.
 */
@OptIn(dev.tpcomm.InternalTpcommApi::class)
fun main(args: Array<String>) {
    val mode = args.firstOrNull() ?: "conformance"
    if (mode == "version") {
        val probe = try {
            JavaCppPlatform.probe()
        } catch (e: LinkageError) {
            GpuProbe(false, "NCCL or the CUDA runtime did not load through JavaCPP: $e", 0, 0)
        }
        if (probe.libraryVersion == 0) {
            println("nccl version unknown: ${probe.reason}")
            exitProcess(2)
        }
        println("nccl version ${probe.libraryVersion} (${dev.tpcomm.gpu.NcclVersion.format(probe.libraryVersion)}) via javacpp, ${probe.deviceCount} device(s)" +
            (probe.reason?.let { "; unavailable: $it" } ?: ""))
        exitProcess(0)
    }
    if (mode == "mpi-staging") {
        exitProcess(if (runBlocking { CudaStagingCheck.run(CommConfig.fromEnvironment()) } == 0) 0 else 1)
    }
    if (mode == "allocations") {
        exitProcess(if (runBlocking { JavaCppAllocationsCheck.run(CommConfig.fromEnvironment()) } == 0) 0 else 1)
    }
    val maxBytes = args.indexOf("--max-bytes").takeIf { it >= 0 }?.let { args.getOrNull(it + 1)?.toLongOrNull() } ?: AllReduceSweep.MAX_BYTES
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
            if (mode == "latency") {
                AllReduceLatency.run(comm, copies, impl = "tpcomm-javacpp")
                0
            } else if (mode == "bench") {
                if (comm.rank == 0) println("# tpcomm-javacpp: world ${comm.worldSize}, rank 0 on ${comm.device}")
                AllReduceSweep.run(comm, copies, impl = "tpcomm-javacpp", maxBytes = maxBytes)
                0
            } else {
                GpuCheckConformance.run(comm, copies) { _, timeout -> Comm.create(comm.backendName, GpuCheckConformance.scratchConfig(config, timeout)) }
            }
        } finally {
            comm.close()
        }
    }
    exitProcess(code)
}
