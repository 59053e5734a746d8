package dev.tpcomm.mpi.jobs

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.mpi.MpiCommunicator
import kotlinx.coroutines.withContext
import kotlin.time.Duration.Companion.seconds

/**
 * One rank of the job for [dev.tpcomm.mpi.MpiDefaultMismatchJobsTest] (issue 20 item 2): mismatched
 * collectives with the DEFAULT configuration (a plain `CommConfig`, no `checkConsistency`), called
 * as users call them: from `runBlocking` (the natural path) and from the communicator's own
 * thread (the fast path). Every rank must get a [CollectiveMismatchException], never a normal
 * return with garbage. Each case runs on a duplicate of the world (a mismatch aborts it).
 */
object MpiDefaultMismatchMain {
    val CASES: List<String> = listOf(
        "an uneven allGather (rank r passes r+1 elements) raises CollectiveMismatchException on every rank",
        "an allReduce with Sum on rank 0 and Max elsewhere raises CollectiveMismatchException on every rank",
        "a broadcast of different lengths from the communicator's thread (fast path) raises CollectiveMismatchException on every rank",
        "matched collectives still return the right values with the default check",
        "allToAllV whose outputSplits disagree with the peers' inputSplits raises CollectiveMismatchException on every rank (blocking and fast path)",
        "allGatherV and reduceScatterV with different sizes on rank 0 raise CollectiveMismatchException on every rank",
        "matched uneven collectives return the right rows; a result above MPI's int count is refused before anything moves",
    )

    @JvmStatic
    fun main(args: Array<String>) {
        // The defaults, as a user writes them. The world stays open for the whole program (closing
        // the last communicator finalizes MPI); each case runs on a duplicate, since a mismatch aborts it.
        DuplicateCases.runJob(args, { Comm.create("mpi", CommConfig(timeout = 30.seconds)) as MpiCommunicator }) { world ->
            suspend fun expectMismatch(what: String, block: suspend () -> Unit) {
                try {
                    block()
                } catch (e: CollectiveMismatchException) {
                    return
                }
                error("$what returned normally: expected CollectiveMismatchException")
            }
            case(CASES[0]) { comm ->
                val input = Tensor.zeros(DType.Float32, comm.rank + 1).fill(comm.rank + 1.0)
                expectMismatch("allGather of ${comm.rank + 1} elements") {
                    val got = comm.allGather(input)
                    error("allGather returned ${got.toFloatArray().toList()}")
                }
            }
            case(CASES[1]) { comm ->
                val t = Tensor.zeros(DType.Float32, 4).fill(comm.rank + 1.0)
                expectMismatch("allReduce") { comm.allReduce(t, if (comm.rank == 0) ReduceOp.Sum else ReduceOp.Max) }
            }
            case(CASES[2]) { comm ->
                val t = Tensor.zeros(DType.Float32, 2 + comm.rank)
                withContext(comm.nativeDispatcher) {
                    expectMismatch("broadcast") { comm.broadcast(t, 0) }
                }
            }
            case(CASES[3]) { comm ->
                val n = comm.worldSize
                val t = Tensor.zeros(DType.Float32, 3).fill(comm.rank + 1.0)
                comm.allReduce(t)
                check(t.toFloatArray().all { it == (n * (n + 1) / 2).toFloat() }) { "allReduce gave ${t.toFloatArray().toList()}" }
                val g = comm.allGather(Tensor.zeros(DType.Int32, 2).fill(comm.rank.toDouble()))
                check(g.toIntArray().toList() == (0 until n).flatMap { listOf(it, it) }) { "allGather gave ${g.toIntArray().toList()}" }
                withContext(comm.nativeDispatcher) {
                    val b = Tensor.zeros(DType.Float32, 2).fill(if (comm.rank == 0) 7.0 else 0.0)
                    comm.broadcast(b, 0)
                    check(b.toFloatArray().all { it == 7f }) { "broadcast gave ${b.toFloatArray().toList()}" }
                }
            }
            case(CASES[4]) { comm ->
                val n = comm.worldSize
                // Every rank sends one row to each; rank 0 expects two from rank 1.
                val outputSplits = List(n) { if (comm.rank == 0 && it == 1) 2 else 1 }
                expectMismatch("allToAllV") { comm.allToAllV(Tensor.zeros(DType.Float32, n, 2), List(n) { 1 }, outputSplits) }
                val fast = world.duplicate() as MpiCommunicator
                try {
                    withContext(fast.nativeDispatcher) {
                        expectMismatch("allToAllV on the communicator's thread") {
                            fast.allToAllV(Tensor.zeros(DType.Float32, n, 2), List(n) { 1 }, outputSplits)
                        }
                    }
                } finally {
                    fast.close()
                }
            }
            case(CASES[5]) { comm ->
                val n = comm.worldSize
                val sizes = List(n) { if (comm.rank == 0 && it == 1) 2 else 1 }
                expectMismatch("allGatherV") { comm.allGatherV(Tensor.zeros(DType.Float32, 1, 2), sizes) }
                val other = world.duplicate() as MpiCommunicator
                try {
                    val split = List(n) { if (comm.rank == 0) (if (it == 0) 2 else if (it == 1) 0 else 1) else 1 }
                    expectMismatch("reduceScatterV") { other.reduceScatterV(Tensor.zeros(DType.Float32, n, 2), split) }
                } finally {
                    other.close()
                }
            }
            case(CASES[6]) { comm ->
                val n = comm.worldSize
                val me = comm.rank
                // Rank r sends r + 1 rows (value 10 r + j) to rank j.
                val rows = List(n) { me + 1 }
                val input = Tensor.of(FloatArray((me + 1) * n) { (10 * me + it / (me + 1)).toFloat() }, (me + 1) * n, 1)
                val got = comm.allToAllV(input, rows, List(n) { it + 1 }).toFloatArray().toList()
                val expected = (0 until n).flatMap { j -> List(j + 1) { (10 * j + me).toFloat() } }
                check(got == expected) { "allToAllV gave $got, expected $expected" }
                val g = comm.allGatherV(Tensor.zeros(DType.Int32, me, 1).fill(me.toDouble()), List(n) { it }).toIntArray().toList()
                check(g == (0 until n).flatMap { r -> List(r) { r } }) { "allGatherV gave $g" }
                val rs = comm.reduceScatterV(Tensor.of(FloatArray(n * (n + 1) / 2) { 1f }, n * (n + 1) / 2, 1), List(n) { it + 1 })
                check(rs.toFloatArray().toList() == List(me + 1) { n.toFloat() }) { "reduceScatterV gave ${rs.toFloatArray().toList()}" }
                // 64-bit counts: 2^30 rows of two elements fit a dimension but need MPI counts beyond int;
                // refused on every rank, before any data moves (no memory of that size is allocated).
                val big = Int.MAX_VALUE / 2 + 1
                val e = runCatching { comm.allToAllV(Tensor.zeros(DType.Int8, n, 2), List(n) { 1 }, List(n) { if (it == 0) big else 1 }) }.exceptionOrNull()
                check(e is IllegalArgumentException && e.message!!.contains("more than this backend moves in one call")) { "a result above 2^31 - 1 elements: got $e" }
                comm.barrier() // still usable
            }
        }
    }
}
