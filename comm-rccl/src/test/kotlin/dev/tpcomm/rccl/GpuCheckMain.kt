package dev.tpcomm.rccl

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.DeviceCopies
import dev.tpcomm.testkit.CaseResult
import dev.tpcomm.testkit.ConformanceOptions
import dev.tpcomm.testkit.ScratchCommunicatorFactory
import dev.tpcomm.testkit.SpmdConformanceRunner
import dev.tpcomm.testkit.TensorPlacement
import kotlinx.coroutines.runBlocking
import kotlin.system.exitProcess

/**
 * For `scripts/gpu-check.sh` on a machine with AMD GPUs (never run in CI or on the build machine):
 * the comm-testkit cases (`conformance`) or an all-reduce sweep (`bench`) on the real RCCL backend,
 * one process per rank. Same as comm-nccl's GpuCheckMain, over HIP.
 */
fun main(args: Array<String>) {
    val mode = args.firstOrNull() ?: "conformance"
    val config = CommConfig.fromEnvironment()
    val factory = RcclBackendFactory()
    if (!factory.isAvailable()) {
        System.err.println("rccl is unavailable: ${factory.unavailableReason()}")
        exitProcess(2)
    }
    val code = runBlocking {
        val comm = factory.create(config)
        val copies = DeviceCopies(HipRuntime(), comm.device)
        try {
            if (mode == "bench") {
                val n = comm.worldSize
                var bytes = 8L
                while (bytes <= 256L shl 20) {
                    val t = copies.upload(Tensor.zeros(DType.Float32, (bytes / 4).toInt()))
                    val iters = if (bytes < (1 shl 20)) 50 else 10
                    repeat(5) { comm.allReduce(t) }
                    comm.barrier()
                    val start = System.nanoTime()
                    repeat(iters) { comm.allReduce(t) }
                    val us = (System.nanoTime() - start) / 1000.0 / iters
                    val algbw = bytes / us / 1000.0
                    if (comm.rank == 0) println("%12d %10.2f us %8.2f GB/s algbw %8.2f GB/s busbw".format(bytes, us, algbw, algbw * 2.0 * (n - 1) / n))
                    bytes *= 2
                }
                0
            } else {
                val options = ConformanceOptions(
                    ops = setOf(ReduceOp.Sum, ReduceOp.Product, ReduceOp.Min, ReduceOp.Max, ReduceOp.Avg),
                    pointToPoint = false, groups = false, checksConsistency = false,
                    placement = object : TensorPlacement {
                        override fun toBackend(host: Tensor): Tensor = copies.upload(host)
                        override fun toHost(tensor: Tensor): Tensor = copies.download(tensor)
                    },
                )
                val scratch = ScratchCommunicatorFactory { _, timeout -> Comm.create("rccl", config.copy(timeout = timeout)) }
                val results = SpmdConformanceRunner.run(comm, options = options, scratch = scratch, report = { r ->
                    println("rank ${r.rank}: ${r.status} ${r.case}" + (r.message?.let { " — $it" } ?: ""))
                })
                if (results.none { it.status == CaseResult.Status.Failed }) 0 else 1
            }
        } finally {
            comm.close()
        }
    }
    exitProcess(code)
}
