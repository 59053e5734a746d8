package dev.tpcomm.mpi

import dev.tpcomm.Device
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.spi.CollectiveOp

/**
 * The work [MpiCommunicator] does on the host around an MPI call: a reduction the library cannot do
 * ([MpiWorkarounds.hostReduced]), PreMulSum's scaling, Avg's division, and the rearrangement of a
 * tensor chunked along a dim other than 0. A device tensor the library is given directly (a CUDA
 * tensor with a CUDA-aware MPI, [passesDevicePointers]) allows none of it. One source for the
 * validator's refusal ([refusal], before the call is recorded or numbered) and the run paths'
 * guard ([guard]). Device tensors that are staged through host memory need nothing of this.
 *
 * Stateless apart from its two immutable inputs; thread-safe.
 */
internal class MpiHostWork(private val workarounds: MpiWorkarounds, private val passesDevicePointers: Boolean) {
    /** Whether MPI is given [t]'s device pointer directly (otherwise [t] is on the host, or staged through it). */
    fun direct(t: Tensor): Boolean = t.device.isGpu && passesDevicePointers && t.device is Device.Cuda

    /**
     * What [op] with [reduceOp] along the normalised dim [d] does on the host with [t] (its input,
     * or scatter's output, whose layout decides), or null when MPI takes [t] as it is.
     */
    fun reason(op: CollectiveOp, t: Tensor, reduceOp: ReduceOp?, d: Int): String? = when (op) {
        CollectiveOp.AllReduce, CollectiveOp.Reduce -> when {
            reduceOp is ReduceOp.PreMulSum -> PRE_MUL_ON_HOST
            reduceOp != null && workarounds.hostReduced(t.dtype, reduceOp) -> HOST_REDUCTION
            reduceOp == ReduceOp.Avg -> "Avg divides on the host after the MPI sum"
            else -> null
        }
        CollectiveOp.ReduceScatter -> when {
            reduceOp != null && workarounds.hostReduced(t.dtype, reduceOp) -> HOST_REDUCTION
            reduceOp is ReduceOp.PreMulSum -> PRE_MUL_ON_HOST
            !contiguousAlong(t, d) || reduceOp == ReduceOp.Avg -> "this reduce-scatter finishes on the host"
            else -> null
        }
        CollectiveOp.AllGather, CollectiveOp.Gather -> if (contiguousAlong(t, d)) null else "gathering along dim $d rearranges on the host"
        CollectiveOp.Scatter -> if (contiguousAlong(t, d)) null else "scattering along dim $d rearranges on the host"
        CollectiveOp.AllToAll -> if (contiguousAlong(t, d)) null else "all-to-all along dim $d rearranges on the host"
        else -> null
    }

    /**
     * The validator's refusal of [t] in [op] (text after `"operation: "`): null unless [t] goes to
     * MPI directly and [op] needs host work on it ([reason]).
     */
    fun refusal(op: CollectiveOp, t: Tensor, reduceOp: ReduceOp?, d: Int): String? =
        if (!direct(t)) null else reason(op, t, reduceOp, d)?.let { why -> message(why, t.device) }

    /**
     * The run paths' guard, after the validator: throws [IllegalArgumentException] when [t] (a host
     * tensor, a staged temporary, or a device tensor MPI takes directly) is on a device and [op]
     * would touch it on the host; [layout] is the tensor whose shape decides (by default [t]).
     * Unreachable once the validator ran ([refusal]); costs one device check on host tensors.
     */
    fun guard(op: CollectiveOp, reduceOp: ReduceOp?, d: Int, t: Tensor, layout: Tensor = t) {
        if (!t.device.isGpu) return
        val why = reason(op, layout, reduceOp, d) ?: return
        throw IllegalArgumentException("${op.apiName}: ${message(why, t.device)}")
    }

    private fun message(why: String, device: Device): String =
        "$why, which needs a host tensor, but the tensor is on $device; copy it to the host first, " +
            "or set mpi.cudaAware=Disabled to have device tensors staged through host memory (docs/mpi.md)"

    internal companion object {
        const val PRE_MUL_ON_HOST: String = "PreMulSum scales on the host before the MPI sum"
        const val HOST_REDUCTION: String = "this reduction runs on the host"

        /** True when chunks along [d] are contiguous (every dimension before [d] has size 1). */
        fun contiguousAlong(t: Tensor, d: Int): Boolean = (0 until d).all { t.shape[it] == 1 }
    }
}
