package dev.tpcomm.gpu

import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.ReduceOp
import dev.tpcomm.spi.CollectiveValidator
import dev.tpcomm.spi.PointToPointLimits

/**
 * What NCCL and RCCL cannot do although the API allows it, declared as capabilities of the core's
 * [CollectiveValidator], which refuses it before a call is recorded or numbered (as every other bad
 * argument, on every backend). [NcclCommunicator] keeps only the mapping to NCCL's codes.
 *
 * Thread-safe: the refusals read only immutable values.
 */
internal class NcclLimits(
    private val api: NcclApi,
    private val backendName: String,
    /** The library's version code as `ncclGetVersion` reports it. */
    private val versionCode: Int,
) {
    /** The validator of a communicator of [worldSize] ranks on [device] whose rank is [rank]. */
    fun validator(worldSize: Int, rank: Int, device: Device): CollectiveValidator = CollectiveValidator(
        worldSize, device, nativeMemory = false,
        dtypeRefusal = ::dtypeRefusal,
        reductionRefusal = ::reductionRefusal,
        pointToPointLimits = PointToPointLimits(
            rank, backendName,
            // ncclSend(sendbuff, count, datatype, peer, comm, stream) and ncclRecv take a peer rank and no tag
            // (NVIDIA/nccl docs/userguide/source/api/p2p.rst; src/nccl.h.in): messages between two ranks
            // match in the order they were issued, and a receive names its sender (no wildcard source).
            untaggedReason = "NCCL matches messages between two ranks by order only",
            noAnySourceReason = "NCCL needs the sender's rank",
            // The engine issues a lone send as its own group, which a send to oneself cannot complete
            // without the matching receive in the same group (today's refusal, unchanged).
            noSelfMessageReason = "a lone ncclSend to oneself never completes",
            // nccl.h declares no probe: a receive must name its buffer and size before any byte arrives.
            noProbeReason = "NCCL has no probe",
        ),
    )

    /** Bfloat16 needs 2.10 (unreachable through [NcclConnector], whose minimum is 2.18). */
    fun dtypeRefusal(dtype: DType): String? =
        if (dtype == DType.BFloat16 && versionCode < NcclVersion.AVG_AND_BFLOAT16) {
            "${api.libraryName} ${NcclVersion.format(versionCode)} has no bfloat16 (needs 2.10 or later); use Float16/Float32 or upgrade"
        } else {
            null
        }

    /**
     * What NCCL/RCCL cannot reduce among what the core accepts: no bitwise reductions (`ncclRedOp_t`
     * has none, see [NcclRedOp]); Int16 has no NCCL type ([NcclDataType.of]); FP8 needs NCCL 2.24 and
     * the OCP formats (not RCCL's FNUZ ones); Avg needs 2.10. Bool is reduced as uint8 with max and
     * min ([NcclCommunicator]'s mapping), as PyTorch's `getNcclReduceOp` does. PreMulSum is accepted
     * on the dtypes the core allows it on.
     */
    fun reductionRefusal(op: ReduceOp, dtype: DType): String? {
        if (op is ReduceOp.PreMulSum) return null
        if (NcclRedOp.of(op) == null) {
            return "$op is not supported by $backendName: ${api.libraryName} has no bitwise reductions; " +
                "use the mpi or local backend for bitwise ops, or Sum/Product/Min/Max/Avg" +
                (if (dtype == DType.Bool) " (on Bool, Sum or Max is a logical or, Product or Min a logical and)" else "")
        }
        if (NcclDataType.of(dtype) == null) {
            return "$backendName cannot reduce $dtype: ${api.libraryName} has no ${dtype.name.lowercase()} type; " +
                "convert the tensor to Int32 (exact for every $dtype value) and reduce that, or use the mpi or local backend " +
                "(data movement such as broadcast and allGather carries $dtype as it is)"
        }
        if (dtype == DType.Float8E4M3 || dtype == DType.Float8E5M2) {
            if (!api.float8IsOcp) {
                return "$backendName cannot reduce $dtype: ${api.libraryName}'s 8-bit float types are not the OCP formats tpcomm's $dtype holds " +
                    "(RCCL's are AMD's FNUZ variants on MI300); convert to Float16 or BFloat16 and reduce, or use the mpi or local backend"
            }
            if (versionCode < NcclDataType.FLOAT8_VERSION) {
                return "$backendName cannot reduce $dtype: ${api.libraryName} ${NcclVersion.format(versionCode)} has no " +
                    "8-bit float types (ncclFloat8e4m3/ncclFloat8e5m2 need NCCL 2.24 or later); convert to Float16 or BFloat16 and reduce, or upgrade"
            }
        }
        if (op == ReduceOp.Avg && dtype != DType.Bool && versionCode < NcclVersion.AVG_AND_BFLOAT16) {
            return "Avg needs ${api.libraryName} 2.10 or later, this is ${NcclVersion.format(versionCode)}; use Sum and divide, or upgrade"
        }
        return null
    }
}
