package dev.tpcomm.bench.flight

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.dumpFlightRecorder
import kotlinx.coroutines.runBlocking
import kotlin.time.Duration.Companion.seconds

/**
 * One rank of an MPI job for [FlightAnalyzerMpiJobsTest]: six collectives (all-reduce, broadcast
 * from 0, all-gather, alternating); rank `culprit` commits `fault` before collective `at`.
 * Arguments: dumpDir fault culprit at. Faults: `sleep` (past the 3 s deadline), `root` (broadcast
 * from 1 instead of 0, consistency checks on), `killed` (the JVM halts: no dump, no shutdown hooks),
 * `straggler` (sleeps 400 ms; every rank dumps on demand at the end).
 */
object MpiScenarioMain {
    @JvmStatic
    fun main(args: Array<String>) {
        val (dir, fault, culpritText, atText) = args
        val culprit = culpritText.toInt()
        val at = atText.toInt()
        val config = CommConfig.fromEnvironment().copy(
            timeout = if (fault == "straggler") 60.seconds else 3.seconds,
            checkConsistency = fault == "root",
            flightRecorderDir = dir,
        )
        runBlocking {
            val comm = Comm.create("mpi", config)
            val me = comm.rank == culprit
            for (n in 1..6) {
                if (me && n == at) {
                    when (fault) {
                        "sleep" -> Thread.sleep(7_000)
                        "straggler" -> Thread.sleep(400)
                        "killed" -> Runtime.getRuntime().halt(9)
                    }
                }
                val t = Tensor.zeros(DType.Float32, 2)
                when (n % 3) {
                    1 -> comm.allReduce(t, ReduceOp.Sum)
                    2 -> comm.broadcast(t, root = if (me && n == at && fault == "root") 1 else 0)
                    else -> comm.allGather(t, dim = 0)
                }
            }
            if (fault == "straggler") comm.dumpFlightRecorder()
            comm.close()
        }
    }
}
