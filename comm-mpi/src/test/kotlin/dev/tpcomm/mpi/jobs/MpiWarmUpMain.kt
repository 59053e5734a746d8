package dev.tpcomm.mpi.jobs

import dev.tpcomm.Comm
import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.mpi.MpiCommunicator
import dev.tpcomm.mpi.MpiConfig

/**
 * One rank of the job for [dev.tpcomm.mpi.MpiWarmUpJobsTest] (issue 37): `Comm.create` with the
 * launcher's environment (`CommConfig.fromEnvironment`, `TPCOMM_WARM_UP_SECONDS` set by the test)
 * warms the small-call path before it returns: creation takes at least that long, every rank made
 * the same number of 8-byte all-reduces (read from the communicator's own MPI profile: the
 * consistency check's exchange, which carries them), and the first call of the user's is right.
 */
object MpiWarmUpMain {
    val CASES: List<String> = listOf(
        "Comm.create with TPCOMM_WARM_UP_SECONDS returns after the warm-up, every rank having made the same calls",
    )

    @JvmStatic
    fun main(args: Array<String>) {
        val config = CommConfig.fromEnvironment()
        var createdNanos = 0L
        val create = suspend {
            val start = System.nanoTime()
            (Comm.create("mpi", config.copy(options = mapOf(MpiConfig.PROFILING to "true"))) as MpiCommunicator).also { createdNanos = System.nanoTime() - start }
        }
        DuplicateCases.runJob(args, create) { world ->
            val warmCalls = world.profile()["allReduce(signature)"]?.count ?: 0L
            case(CASES[0]) { comm ->
                check(config.warmUp.inWholeMilliseconds == 400L) { "TPCOMM_WARM_UP_SECONDS did not reach the rank: warmUp ${config.warmUp}" }
                check(createdNanos >= config.warmUp.inWholeNanoseconds) { "Comm.create returned after ${createdNanos / 1e6} ms, before the ${config.warmUp} warm-up" }
                check(warmCalls > 100) { "the warm-up made $warmCalls 8-byte all-reduces" }
                val counts = Tensor.of(doubleArrayOf(warmCalls.toDouble(), -warmCalls.toDouble()))
                comm.allReduce(counts, ReduceOp.Max)
                check(counts.getDouble(0) == warmCalls.toDouble() && -counts.getDouble(1) == warmCalls.toDouble()) {
                    "ranks made different numbers of warm-up calls: this rank $warmCalls, max ${counts.getDouble(0)}, min ${-counts.getDouble(1)}"
                }
                val t = Tensor.zeros(DType.Float32, 2)
                t.setFloat(0, comm.rank + 1f)
                comm.allReduce(t)
                val want = (1..comm.worldSize).sum().toFloat()
                check(t.getFloat(0) == want && t.getFloat(1) == 0f) { "the first call after the warm-up gave ${t.getFloat(0)}, ${t.getFloat(1)}; expected $want, 0" }
            }
        }
    }
}
