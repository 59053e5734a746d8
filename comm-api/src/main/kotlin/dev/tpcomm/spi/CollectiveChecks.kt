package dev.tpcomm.spi

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor

/**
 * Argument checks every backend runs before any data moves, so the same mistake gives the same
 * [IllegalArgumentException] message on every backend. Each message says what to change.
 * Pure functions; thread-safe.
 */
public object CollectiveChecks {
    /** [root] must be a rank of a world of [worldSize]. */
    @JvmStatic
    public fun root(root: Int, worldSize: Int, operation: String) {
        require(root in 0 until worldSize) {
            "$operation: root $root is out of range; pass a rank in 0 until $worldSize"
        }
    }

    /** A peer rank for send/recv: in range, or [Communicator.ANY_SOURCE] when [allowAny]. */
    @JvmStatic
    public fun peer(peer: Int, worldSize: Int, operation: String, allowAny: Boolean) {
        require(peer in 0 until worldSize || (allowAny && peer == Communicator.ANY_SOURCE)) {
            "$operation: peer rank $peer is out of range; pass a rank in 0 until $worldSize" +
                if (allowAny) " or Communicator.ANY_SOURCE" else ""
        }
    }

    /** A tag: >= 0, or [Communicator.ANY_TAG] when [allowAny]. */
    @JvmStatic
    public fun tag(tag: Int, operation: String, allowAny: Boolean) {
        require(tag >= 0 || (allowAny && tag == Communicator.ANY_TAG)) {
            "$operation: tag $tag is invalid; pass a tag >= 0" + if (allowAny) " or Communicator.ANY_TAG" else ""
        }
    }

    /** [dim] must index one of [tensor]'s dimensions (negative counts from the end). */
    @JvmStatic
    public fun dim(tensor: Tensor, dim: Int, operation: String) {
        require(tensor.ndim > 0) { "$operation: a scalar tensor has no dimension $dim; reshape it to one dimension with view(1)" }
        require(dim in -tensor.ndim until tensor.ndim) {
            "$operation: dim $dim is out of range for shape ${tensor.shape}; pass a dim in ${-tensor.ndim}..${tensor.ndim - 1}"
        }
    }

    /** [tensor]'s size along [dim] must be divisible by [parts]. */
    @JvmStatic
    public fun divisible(tensor: Tensor, dim: Int, parts: Int, operation: String) {
        val d = if (dim < 0) dim + tensor.ndim else dim
        require(tensor.shape[d] % parts == 0) {
            "$operation: size ${tensor.shape[d]} of dim $d (shape ${tensor.shape}) is not divisible by the world size $parts; " +
                "pad the tensor so dim $d is a multiple of $parts"
        }
    }

    /** [op] must be defined on [dtype]. */
    @JvmStatic
    public fun op(op: ReduceOp, dtype: DType, operation: String) {
        require(op.supports(dtype)) {
            if (op is ReduceOp.PreMulSum) {
                "$operation: PreMulSum is defined on Float32, Float64, Float16 and BFloat16 only, but the tensor is $dtype; " +
                    "use one of those, or Sum (or Avg) on integers"
            } else if (dtype == DType.Bool) {
                "$operation: $op is not defined on Bool (the average of truth values is not a truth value); " +
                    "use Sum or Max for a logical or, Product or Min for a logical and, or convert to Int32 and use Avg to get a fraction"
            } else {
                "$operation: $op is defined on integer dtypes and Bool only, but the tensor is $dtype; use an integer tensor or an arithmetic op"
            }
        }
    }

    /** [tensor], the [role] of [operation] ("input", "output", ...), must live on [device] and not be closed. */
    @JvmStatic
    @JvmOverloads
    public fun device(tensor: Tensor, device: Device, operation: String, role: String = "tensor") {
        open(tensor, operation, role)
        require(tensor.device == device) {
            if (device.isGpu && !tensor.device.isGpu) {
                "$operation: this communicator moves tensors on $device but got a host tensor; copy it to $device first (no hidden copies are made)"
            } else {
                "$operation: the $role is on ${tensor.device} but this communicator moves tensors on $device"
            }
        }
    }

    /** [tensor], the [role] of [operation], must not be closed (nor be a view of a closed tensor). */
    internal fun open(tensor: Tensor, operation: String, role: String) {
        require(!tensor.isClosed) { "$operation: the $role was closed; pass an open tensor" }
    }

    /** [Communicator.group]'s [ranks] in a world of [worldSize]: not empty, distinct, in range. */
    @JvmStatic
    public fun group(ranks: List<Int>, worldSize: Int) {
        require(ranks.isNotEmpty()) { "group: ranks must not be empty" }
        require(ranks.toSet().size == ranks.size) { "group: ranks $ranks contain duplicates" }
        require(ranks.all { it in 0 until worldSize }) { "group: ranks $ranks must all be in 0 until $worldSize" }
    }

    /** [a] and [b] must have the same dtype. */
    @JvmStatic
    public fun sameDtype(a: Tensor, b: Tensor, operation: String) {
        require(a.dtype == b.dtype) { "$operation: output is ${b.dtype} but input is ${a.dtype}; pass tensors of one dtype" }
    }

    /** [actual] must have exactly the shape [expected]. */
    @JvmStatic
    public fun shape(actual: Tensor, expected: List<Int>, what: String, operation: String) {
        require(actual.shape == expected) { "$operation: $what has shape ${actual.shape} but must be $expected" }
    }
}
