package dev.tpcomm.gpu

import dev.tpcomm.Communicator
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.testkit.CaseResult
import dev.tpcomm.testkit.ConformanceOptions
import dev.tpcomm.testkit.ScratchCommunicatorFactory
import dev.tpcomm.testkit.SpmdConformanceRunner
import dev.tpcomm.testkit.TensorPlacement

/**
 * The conformance step of the GPU checks (comm-nccl's and comm-rccl's GpuCheckMain): the
 * comm-testkit cases on a real library, device tensors through [DeviceCopies], every operation NCCL
 * has, point-to-point as the tag-0 ring (the tag, ANY_SOURCE and probe cases are skipped), one line
 * per case and a summary line printed.
 */
public object GpuCheckConformance {
    /** Runs the cases on [comm], with fresh communicators from [scratch]; returns the exit status (0: none failed). */
    public suspend fun run(comm: Communicator, copies: DeviceCopies, scratch: ScratchCommunicatorFactory): Int {
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
        val results = SpmdConformanceRunner.run(comm, options = options, scratch = scratch, report = { r ->
            println("rank ${r.rank}: ${r.status} ${r.case}" + (r.message?.let { " — $it" } ?: ""))
        })
        val failed = results.count { it.status == CaseResult.Status.Failed }
        println("rank ${comm.rank}: ${results.count { it.status == CaseResult.Status.Passed }} passed, $failed failed, ${results.count { it.status == CaseResult.Status.Skipped }} skipped")
        return if (failed == 0) 0 else 1
    }
}
