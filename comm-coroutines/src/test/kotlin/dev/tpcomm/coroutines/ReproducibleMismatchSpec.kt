package dev.tpcomm.coroutines

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContain
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.types.shouldBeInstanceOf
import kotlin.time.Duration.Companion.seconds

/**
 * A rank reducing reproducibly while a peer reduces with another op, or in the default mode, is a
 * collective mismatch on every rank (not a silently wrong result, nor a hang), at both of the
 * composite's sizes (the small all-gather path and the all-to-all path).
 */
class ReproducibleMismatchSpec : FunSpec({
    timeout = 60_000

    /** Each rank's exception when rank 0 calls [first] and rank 1 [second] on a fresh tensor of [elements] floats. */
    suspend fun errors(elements: Int, first: suspend (Communicator, Tensor) -> Unit, second: suspend (Communicator, Tensor) -> Unit): List<Throwable?> =
        runLocalWorld(2) { comm ->
            val t = Tensor.zeros(DType.Float32, elements)
            try {
                runCatching {
                    kotlinx.coroutines.withTimeout(20.seconds) { if (comm.rank == 0) first(comm, t) else second(comm, t) }
                }.exceptionOrNull()
            } finally {
                t.close()
            }
        }

    for (elements in listOf(2, 64 * 1024)) {
        test("reproducible Sum against reproducible Avg ($elements elements) is a mismatch in op on every rank") {
            errors(elements, { c, t -> c.reproducible().allReduce(t, ReduceOp.Sum) }, { c, t -> c.reproducible().allReduce(t, ReduceOp.Avg) }).forEach {
                val m = it.shouldBeInstanceOf<CollectiveMismatchException>()
                m.fields shouldContain "op"
                m.message!! shouldContain "reproducible"
            }
        }

        test("reproducible Sum against default Sum ($elements elements) is a mismatch on every rank") {
            errors(elements, { c, t -> c.reproducible().allReduce(t, ReduceOp.Sum) }, { c, t -> c.allReduce(t, ReduceOp.Sum) }).forEach {
                val m = it.shouldBeInstanceOf<CollectiveMismatchException>()
                m.fields shouldContain "op"
                m.message!! shouldContain "reproducible"
            }
        }

        test("reproducible reduceScatter Sum against reproducible Avg ($elements elements) is a mismatch on every rank") {
            errors(elements, { c, t -> c.reproducible().reduceScatter(t, ReduceOp.Sum).close() }, { c, t -> c.reproducible().reduceScatter(t, ReduceOp.Avg).close() }).forEach {
                it.shouldBeInstanceOf<CollectiveMismatchException>().fields shouldContain "op"
            }
        }
    }
})
