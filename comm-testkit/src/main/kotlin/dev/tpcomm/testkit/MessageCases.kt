package dev.tpcomm.testkit

import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor

/**
 * The same bad calls on every backend, with the exact message each must give: the check that
 * every backend runs the one validator of `dev.tpcomm.spi` before anything else. The expected
 * texts are written out here, not computed with the validator, so a backend (or a validator
 * change) that words a mistake differently fails this case.
 */
internal object MessageCases {
    private suspend fun expectMessage(ctx: CaseContext, what: String, expected: String, block: suspend () -> Unit) {
        val r = attempt(block)
        val e = r.error
        when {
            e == null -> ctx.fail("$what: expected IllegalArgumentException(\"$expected\"), the call succeeded")
            e !is IllegalArgumentException -> ctx.fail("$what: expected IllegalArgumentException, got ${e.describe()}")
            e.message != expected -> ctx.fail("$what: expected the message \"$expected\", got \"${e.message}\"")
        }
    }

    val all: List<ConformanceCase> = listOf(
        ConformanceCase("arguments: every backend words each mistake the same", CaseKind.Collective) { comm, ctx ->
            val n = comm.worldSize
            val p = ctx.options.placement
            val f32 = DType.Float32 in ctx.options.dtypes
            val dt = if (f32) DType.Float32 else ctx.options.dtypes.minBy { it.ordinal }
            fun t(vararg shape: Int) = p.toBackend(Tensor.zeros(dt, *shape))
            expectMessage(ctx, "broadcast(root = $n)", "broadcast: root $n is out of range; pass a rank in 0 until $n") {
                comm.broadcast(t(2), n)
            }
            expectMessage(ctx, "gather(dim = 2) of a 1-d tensor", "gather: dim 2 is out of range for shape [3]; pass a dim in -1..0") {
                comm.gather(t(3), 0, 2)
            }
            expectMessage(ctx, "allGather(dim = -2) of a 1-d tensor", "allGather: dim -2 is out of range for shape [3]; pass a dim in -1..0") {
                comm.allGather(t(3), -2)
            }
            val wrongOut = t(2 * n + 1)
            expectMessage(ctx, "allGatherInto with a wrong output", "allGather: output has shape [${2 * n + 1}] but must be [${2 * n}]") {
                comm.allGatherInto(wrongOut, t(2))
            }
            // Each rank names itself the root and passes no input, so every rank has the mistake
            // only a root can detect, and every rank must refuse it before talking to the others.
            val me = comm.rank
            expectMessage(ctx, "scatter with a null input on the root",
                "scatter: rank $me is the root and must pass an input of shape [${2 * n}] (the outputs of all ranks joined along dim 0); got null") {
                comm.scatter(t(2), null, me)
            }
            if (f32) {
                expectMessage(ctx, "allReduce(Float32, BitwiseAnd)",
                    "allReduce: BitwiseAnd is defined on integer dtypes and Bool only, but the tensor is Float32; use an integer tensor or an arithmetic op") {
                    comm.allReduce(t(2), ReduceOp.BitwiseAnd)
                }
            }
            if (DType.Bool in ctx.options.dtypes) {
                expectMessage(ctx, "allReduce(Bool, Avg)",
                    "allReduce: Avg is not defined on Bool (the average of truth values is not a truth value); " +
                        "use Sum or Max for a logical or, Product or Min for a logical and, or convert to Int32 and use Avg to get a fraction") {
                    comm.allReduce(p.toBackend(Tensor.zeros(DType.Bool, 2)), ReduceOp.Avg)
                }
            }
            if (n > 1) {
                expectMessage(ctx, "reduceScatter of an indivisible size",
                    "reduceScatter: size ${n + 1} of dim 0 (shape [${n + 1}]) is not divisible by the world size $n; pad the tensor so dim 0 is a multiple of $n") {
                    comm.reduceScatter(t(n + 1))
                }
            }
            expectMessage(ctx, "split(color = -1)", "split: color must be >= 0, or null to opt out; got -1") {
                comm.split(-1)
            }
            val closed = p.toBackend(Tensor.zeros(dt, 4))
            closed.close()
            expectMessage(ctx, "allReduce of a closed tensor", "allReduce: the tensor was closed; pass an open tensor") {
                comm.allReduce(closed)
            }
            if (p === TensorPlacement.Host) {
                val ro = Tensor.wrap(Tensor.zeros(dt, 4).segment.asReadOnly(), dt, 4)
                expectMessage(ctx, "allReduce of a read-only tensor",
                    "allReduce: the tensor is read-only but this call writes it; pass a writable tensor (for example tensor.copy()). " +
                        "(If it is a chunk along a dimension other than 0: such chunks are read-only copies, since Tensor has no strides, " +
                        "so writing one could not change the chunked tensor; reduce a tensor of its own and copy the result back.)") {
                    comm.allReduce(ro)
                }
            }
            val ok = p.toBackend(Tensor.of(intArrayOf(1)).let { if (dt == DType.Int32) it else Tensor.fromDoubles(dt, doubleArrayOf(1.0)) })
            val r = attempt { comm.allReduce(ok) }
            ctx.expect(r.error == null) { "after the refused calls the communicator must stay usable, but allReduce threw ${r.error?.describe()}" }
        },
    )
}
