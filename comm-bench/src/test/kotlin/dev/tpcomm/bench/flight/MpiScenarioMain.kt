package dev.tpcomm.bench.flight

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.dumpFlightRecorder
import dev.tpcomm.mpi.MpiCommunicator
import kotlinx.coroutines.runBlocking
import kotlin.time.Duration.Companion.seconds

/**
 * One rank of an MPI job for [FlightAnalyzerMpiJobsTest]: six collectives, or `at` when more
 * (all-reduce, broadcast from 0, all-gather, alternating); rank `culprit` commits `fault` before
 * collective `at`. Arguments: dumpDir fault culprit at. Faults: `sleep` (7 s, past the 3 s
 * deadline), `sleeplong` (30 s: the job is aborted long before it wakes; issue 20 item 4), `root` (broadcast
 * from 1 instead of 0, consistency checks on), `killed` (the JVM halts: no dump, no shutdown hooks),
 * `straggler` (sleeps 400 ms; every rank dumps on demand at the end). The collectives run on a
 * duplicate of the world (`world.dup1`, the one communicator that dumps; the world gets a long
 * timeout, as MPI start-up on a loaded machine takes longer than the scenario's 3 s).
 */
object MpiScenarioMain {
    @JvmStatic
    fun main(args: Array<String>) {
        val (dir, fault, culpritText, atText) = args
        val culprit = culpritText.toInt()
        val at = atText.toInt()
        val config = CommConfig.fromEnvironment().copy(
            timeout = if (fault == "straggler" || fault == "none") 60.seconds else 3.seconds,
            checkConsistency = fault == "root",
            flightRecorderDir = dir,
        )
        runBlocking {
            // MPI's start-up waits for every rank: on a loaded 2-core machine the JVMs start seconds
            // apart, more than the scenario's 3 s. The world gets a long timeout and no dumps; the
            // scenario runs on a duplicate with the short timeout and the dump folder.
            val world = Comm.create("mpi", config.copy(timeout = 120.seconds, flightRecorderDir = null)) as MpiCommunicator
            val comm = world.duplicate(config)
            val me = comm.rank == culprit
            for (n in 1..maxOf(6, at)) {
                if (me && n == at) {
                    when (fault) {
                        "sleep" -> Thread.sleep(7_000)
                        "sleeplong" -> Thread.sleep(30_000)
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
            if (fault == "straggler" || fault == "none") comm.dumpFlightRecorder()
            comm.close()
            world.close()
        }
    }
}
