package dev.tpcomm.bench.jmh

import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.runBlocking

/**
 * Blocking entry points into the local backend for the JMH benchmarks (written in Java, which
 * cannot call suspend functions). Each call builds a world of [world] ranks (coroutines on
 * `Dispatchers.Default`) and runs [iterations] collectives per rank, so the per-operation time
 * is the call's time divided by [iterations] (JMH's `@OperationsPerInvocation`).
 *
 * One tensor per rank of [count] elements of [dtype] is allocated once and reused. Not
 * thread-safe: one call at a time.
 */
public class LocalCollectiveHarness(private val world: Int, private val dtype: DType, private val count: Int) {
    private val tensors = List(world) { Tensor.zeros(dtype, count) }
    private val config = CommConfig(worldSize = world)

    /** [iterations] in-place SUM all-reduces per rank. */
    public fun allReduce(iterations: Int) {
        runBlocking(Dispatchers.Default) {
            runLocalWorld(world, config) { comm ->
                val t = tensors[comm.rank]
                repeat(iterations) { comm.allReduce(t, ReduceOp.Sum) }
            }
        }
    }

    /** [iterations] barriers per rank: the pure rendezvous cost. */
    public fun barrier(iterations: Int) {
        runBlocking(Dispatchers.Default) {
            runLocalWorld(world, config) { comm -> repeat(iterations) { comm.barrier() } }
        }
    }

    /** Frees the tensors. */
    public fun close() {
        tensors.forEach { it.close() }
    }
}
