package dev.tpcomm.mpi.jobs

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.mpi.MpiCommunicator
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext
import java.nio.file.Path
import kotlin.system.exitProcess
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
    )

    @JvmStatic
    fun main(args: Array<String>) {
        val out = Path.of(args[0])
        val outcomes = ArrayList<CaseOutcome>()
        var rank = -1
        runBlocking {
            // The defaults, as a user writes them. The world stays open for the whole program (closing
            // the last communicator finalizes MPI); each case runs on a duplicate, since a mismatch aborts it.
            val world = Comm.create("mpi", CommConfig(timeout = 30.seconds)) as MpiCommunicator
            rank = world.rank
            suspend fun case(name: String, body: suspend (MpiCommunicator) -> Unit) {
                val comm = world.duplicate() as MpiCommunicator
                val outcome = try {
                    body(comm)
                    CaseOutcome(name, "Passed", "")
                } catch (e: Throwable) {
                    CaseOutcome(name, "Failed", "${e.javaClass.name}: ${e.message}")
                } finally {
                    comm.close()
                }
                outcomes += outcome
            }
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
        }
        CaseReports.write(out, rank, outcomes)
        exitProcess(0) // the world is not closed: the library finalizes MPI at exit
    }
}
