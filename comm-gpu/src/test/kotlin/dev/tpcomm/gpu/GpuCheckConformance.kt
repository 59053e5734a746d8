package dev.tpcomm.gpu

import dev.tpcomm.Communicator
import dev.tpcomm.DType
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
 * has, point-to-point as the tag-0 ring (the tag, ANY_SOURCE and probe cases are skipped), split and
 * group (`ncclCommSplit`), one line per case and a summary line printed.
 *
 * The world is the process's (`RANK`/`WORLD_SIZE`): the GPU bundle runs it at world 2 on one GPU
 * where NCCL allows two ranks of a communicator on one device (2.30 and later with
 * `NCCL_MULTI_RANK_GPU_ENABLE=1`), which is where the ring, split into two sub-communicators and
 * every collective's multi-rank path run; at world 1 the ring is skipped (it needs two ranks) and
 * NCCL's collectives take its single-rank path (`ncclLaunchOneRank`: a copy, a kernel for a
 * floating-point Avg, or nothing; docs/gpu.md).
 */
public object GpuCheckConformance {
    /**
     * The creation deadline of the failure cases' scratch communicators (`CommConfig.creationTimeout`),
     * whose operation timeout is the cases' short `ConformanceOptions.failureTimeout` (1 s): a real
     * `ncclCommInitRankConfig` of two processes takes seconds (bootstrap, topology, connection setup),
     * so the 1 s it used to get was flaky. 60 s is half the bundle's per-step limit
     * (`TPCOMM_GPU_STEP_TIMEOUT`, 120 s), so a scratch creation that hangs is named by tpcomm's
     * `CommunicationTimeoutException` before the step is killed.
     */
    public val SCRATCH_CREATION_TIMEOUT: kotlin.time.Duration = kotlin.time.Duration.parse("60s")

    /** [config] for a failure case's scratch communicator: the case's short operation [timeout], [SCRATCH_CREATION_TIMEOUT] to create it. */
    public fun scratchConfig(config: dev.tpcomm.CommConfig, timeout: kotlin.time.Duration): dev.tpcomm.CommConfig =
        config.copy(timeout = timeout, creationTimeout = SCRATCH_CREATION_TIMEOUT)

    /** The options of [run]: what NCCL does, device placement through [copies]. */
    public fun options(copies: DeviceCopies): ConformanceOptions = ConformanceOptions(
        // NCCL has no int16; FP8 reductions need NCCL 2.24 and an sm90 (Hopper) or newer GPU.
        reducedDtypes = DType.entries.toSet() - DType.Int16,
        ops = setOf(ReduceOp.Sum, ReduceOp.Product, ReduceOp.Min, ReduceOp.Max, ReduceOp.Avg),
        pointToPoint = true,
        taggedPointToPoint = false,
        groups = true,
        checksConsistency = false,
        placement = object : TensorPlacement {
            override fun toBackend(host: Tensor): Tensor = copies.upload(host)
            override fun toHost(tensor: Tensor): Tensor = copies.download(tensor)
        },
    )

    /** Runs the cases on [comm], with fresh communicators from [scratch]; returns the exit status (0: none failed). */
    public suspend fun run(comm: Communicator, copies: DeviceCopies, scratch: ScratchCommunicatorFactory): Int {
        println("rank ${comm.rank}: conformance at world ${comm.worldSize} on ${comm.device} (${comm.backendName})")
        val results = SpmdConformanceRunner.run(comm, options = options(copies), scratch = scratch, report = { r ->
            println("rank ${r.rank}: ${r.status} ${r.case}" + (r.message?.let { " — $it" } ?: ""))
        })
        val failed = results.count { it.status == CaseResult.Status.Failed }
        println("rank ${comm.rank}: ${results.count { it.status == CaseResult.Status.Passed }} passed, $failed failed, ${results.count { it.status == CaseResult.Status.Skipped }} skipped")
        return if (failed == 0) 0 else 1
    }
}
