package dev.tpcomm.testkit

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContain
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.awaitCancellation
import kotlinx.coroutines.withContext
import kotlin.time.Duration.Companion.seconds

/** A local-backend communicator with one deliberate bug, to show the suite catches it. */
private open class Faulty(val delegate: Communicator) : Communicator by delegate

/**
 * The suite can fail: each test plants one bug in an otherwise correct backend and checks that the
 * case meant to catch it fails (and says why).
 */
class FaultDetectionSpec : FunSpec({
    val options = ConformanceOptions(timeout = 1.seconds, randomCollectives = 10)

    suspend fun run(caseName: String, worldSize: Int, wrap: (Communicator) -> Communicator): List<CaseResult> =
        withContext(Dispatchers.Default) {
            runLocalWorld(worldSize, CommConfig(worldSize = worldSize, timeout = options.timeout, checkConsistency = true)) { comm ->
                SpmdConformanceRunner.runCase(ConformanceCases.named(caseName), wrap(comm), options)
            }
        }

    fun List<CaseResult>.failureText(): String {
        map { it.status } shouldContain CaseResult.Status.Failed
        return filter { it.status == CaseResult.Status.Failed }.joinToString("\n") { it.message ?: "" }
    }

    test("an allReduce off by one on one rank fails the allReduce case") {
        val results = run("allReduce: every dtype and op", 3) { c ->
            object : Faulty(c) {
                override suspend fun allReduce(tensor: Tensor, op: ReduceOp): Tensor {
                    delegate.allReduce(tensor, op)
                    if (rank == 2) tensor.setDouble(0, tensor.getDouble(0) + 1)
                    return tensor
                }
            }
        }
        results.failureText() shouldContain "allReduce result"
    }

    test("a broadcast that ignores its root fails the broadcast case") {
        val results = run("broadcast: from every root, every dtype", 2) { c ->
            object : Faulty(c) {
                override suspend fun broadcast(tensor: Tensor, root: Int): Tensor = delegate.broadcast(tensor, 0)
            }
        }
        results.failureText() shouldContain "broadcast from root 1"
    }

    test("a reduceScatter handing every rank chunk 0 fails the reduceScatter case") {
        val results = run("reduceScatter: every dim, dtype and op, equal to the chunk of an allReduce", 2) { c ->
            object : Faulty(c) {
                override suspend fun reduceScatterInto(output: Tensor, input: Tensor, op: ReduceOp, dim: Int): Tensor {
                    val full = input.copy()
                    delegate.allReduce(full, op)
                    return output.copyFrom(full.chunk(worldSize, dim)[0])
                }
            }
        }
        results.failureText() shouldContain "reduceScatter result"
    }

    test("an allToAll that returns its input fails the allToAll case") {
        val results = run("allToAll: every dim and dtype", 2) { c ->
            object : Faulty(c) {
                override suspend fun allToAll(input: Tensor, dim: Int): Tensor {
                    delegate.barrier()
                    return input.copy()
                }
            }
        }
        results.failureText() shouldContain "allToAll result"
    }

    test("an allToAllV that returns its input fails the allToAllV case") {
        val results = run("allToAllV: skewed splits with empty pairs, every dtype; equal splits equal allToAll", 3) { c ->
            object : Faulty(c) {
                override suspend fun allToAllV(input: Tensor, inputSplits: List<Int>, outputSplits: List<Int>): Tensor {
                    delegate.barrier()
                    return input.copy()
                }
            }
        }
        results.failureText() shouldContain "allToAllV"
    }

    test("a reduceScatterV that hands every rank the first rows fails the reduceScatterV case") {
        val results = run("reduceScatterV: even, skewed and zero-row ranks, every dtype and op", 3) { c ->
            object : Faulty(c) {
                override suspend fun reduceScatterV(input: Tensor, sizes: List<Int>, op: ReduceOp): Tensor =
                    delegate.reduceScatterV(input, sizes, op).also { delegate.barrier() }.let { mine ->
                        if (mine.shape[0] == 0) mine else input.narrow(0, 0, mine.shape[0]).copy()
                    }
            }
        }
        results.failureText() shouldContain "reduceScatterV"
    }

    test("accepting a bitwise op on floats fails the argument case") {
        val results = run("arguments: a bitwise op on floats is refused", 2) { c ->
            object : Faulty(c) {
                override suspend fun allReduce(tensor: Tensor, op: ReduceOp): Tensor =
                    if (op.isBitwise && tensor.dtype.isFloatingPoint) tensor else delegate.allReduce(tensor, op)
            }
        }
        results.failureText() shouldContain "expected IllegalArgumentException, the call succeeded"
    }

    test("a split that ignores keys fails the split case") {
        val results = run("split: colors and keys order the sub-communicators", 4) { c ->
            object : Faulty(c) {
                override suspend fun split(color: Int?, key: Int): Communicator? = delegate.split(color, rank)
            }
        }
        results.failureText() shouldContain "split"
    }

    test("ops a backend declares unsupported must be refused: a refusing backend passes, an accepting one fails") {
        val noBitwise = options.copy(ops = setOf(ReduceOp.Sum, ReduceOp.Product, ReduceOp.Min, ReduceOp.Max, ReduceOp.Avg))
        val case = ConformanceCases.named("arguments: ops the backend does not perform are refused")
        suspend fun runWith(refuse: Boolean) = withContext(Dispatchers.Default) {
            runLocalWorld(2, CommConfig(worldSize = 2, timeout = options.timeout)) { c ->
                val comm = object : Faulty(c) {
                    fun check(op: ReduceOp) = require(!refuse || !op.isBitwise) { "this backend has no $op" }
                    override suspend fun allReduce(tensor: Tensor, op: ReduceOp): Tensor { check(op); return delegate.allReduce(tensor, op) }
                    override suspend fun reduce(tensor: Tensor, root: Int, op: ReduceOp): Tensor { check(op); return delegate.reduce(tensor, root, op) }
                    override suspend fun reduceScatterInto(output: Tensor, input: Tensor, op: ReduceOp, dim: Int): Tensor { check(op); return delegate.reduceScatterInto(output, input, op, dim) }
                    override suspend fun reduceScatter(input: Tensor, op: ReduceOp, dim: Int): Tensor { check(op); return delegate.reduceScatter(input, op, dim) }
                }
                SpmdConformanceRunner.runCase(case, comm, noBitwise)
            }
        }
        runWith(refuse = true).filter { it.status != CaseResult.Status.Passed }.map { it.message } shouldBe emptyList()
        runWith(refuse = false).failureText() shouldContain "expected IllegalArgumentException, the call succeeded"
    }

    test("a barrier that never returns fails the case by its guard instead of hanging") {
        val results = run("barrier: repeated, interleaved with allReduce", 2) { c ->
            object : Faulty(c) {
                override suspend fun barrier() { if (rank == 1) awaitCancellation() else delegate.barrier() }
            }
        }
        results.failureText() shouldContain "barrier"
    }

    test("a collective that ignores cancellation fails the cancellation case") {
        val results = run("failure: cancelling one rank's in-flight call", 2) { c ->
            object : Faulty(c) {
                override suspend fun allReduce(tensor: Tensor, op: ReduceOp): Tensor =
                    withContext(kotlinx.coroutines.NonCancellable) { delegate.allReduce(tensor, op) }
            }
        }
        results.failureText() shouldContain "cancel"
    }
})
