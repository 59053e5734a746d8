package dev.tpcomm.nccl

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
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
 * rank (rank and world from the environment, `TPCOMM_RENDEZVOUS` for the id); `bench` times
 * all-reduce over device tensors from 8 B to 256 MiB and prints nccl-tests' columns.
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
    val n = comm.worldSize
    if (comm.rank == 0) println("%12s %12s %8s %6s %10s %8s %8s".format("size", "count", "type", "redop", "time(us)", "algbw", "busbw"))
    var bytes = 8L
    while (bytes <= 256L shl 20) {
        val count = (bytes / 4).toInt()
        val t = copies.upload(Tensor.zeros(DType.Float32, count))
        val iters = if (bytes < (1 shl 20)) 50 else 10
        repeat(5) { comm.allReduce(t) }
        comm.barrier()
        val start = System.nanoTime()
        repeat(iters) { comm.allReduce(t) }
        val us = (System.nanoTime() - start) / 1000.0 / iters
        val algbw = bytes / us / 1000.0
        if (comm.rank == 0) println("%12d %12d %8s %6s %10.2f %8.2f %8.2f".format(bytes, count, "float", "sum", us, algbw, algbw * 2.0 * (n - 1) / n))
        bytes *= 2
    }
    return 0
}
