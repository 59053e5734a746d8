package dev.tpcomm.bench.jmh

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.LocalWorld
import dev.tpcomm.mpi.MpiBackendFactory
import dev.tpcomm.mpi.MpiCommunicator
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.async
import kotlinx.coroutines.awaitAll
import kotlinx.coroutines.runBlocking
import kotlinx.coroutines.withContext

/**
 * Blocking entry points for [FlightRecorderOverheadBenchmark]: one communicator world created once
 * (`local1`: a local world of one rank, `local2`: of two ranks, `mpi`: an MPI singleton world) and
 * [allReduce] running 8-byte in-place SUM all-reduces in a loop on every rank, so that the time per
 * operation is the call's time divided by the iterations. Not thread-safe: one call at a time.
 */
public class RecorderOverheadHarness(private val backend: String) : AutoCloseable {
    private val local: LocalWorld? = when (backend) {
        "local1" -> LocalWorld(1)
        "local2" -> LocalWorld(2)
        else -> null
    }
    private val mpi: MpiCommunicator? = if (backend == "mpi") runBlocking { MpiBackendFactory().create(CommConfig.fromEnvironment(emptyMap())) } as MpiCommunicator else null
    private val comms: List<Communicator> = local?.let { w -> List(w.worldSize) { w.communicator(it) } } ?: listOfNotNull(mpi)
    private val tensors = comms.map { Tensor.zeros(DType.Float32, 2) }

    init {
        require(comms.isNotEmpty()) { "backend must be local1, local2 or mpi, got $backend" }
    }

    /** [iterations] 8-byte in-place SUM all-reduces on every rank. */
    public fun allReduce(iterations: Int) {
        val m = mpi
        if (m != null) {
            val t = tensors[0]
            runBlocking { withContext(m.nativeDispatcher) { repeat(iterations) { m.allReduce(t, ReduceOp.Sum) } } }
            return
        }
        if (comms.size == 1) {
            val c = comms[0]; val t = tensors[0]
            runBlocking { repeat(iterations) { c.allReduce(t, ReduceOp.Sum) } }
            return
        }
        runBlocking(Dispatchers.Default) {
            comms.indices.map { r -> async { val c = comms[r]; val t = tensors[r]; repeat(iterations) { c.allReduce(t, ReduceOp.Sum) } } }.awaitAll()
        }
    }

    /**
     * [iterations] all-reduces like [allReduce] on one rank (local1 or mpi), then [cpuNanos] with
     * the CPU time the looping thread spent in them.
     */
    public fun allReduceTimed(iterations: Int, cpuNanos: (Long) -> Unit) {
        val threads = java.lang.management.ManagementFactory.getThreadMXBean()
        val m = mpi
        val t = tensors[0]
        if (m != null) {
            runBlocking {
                withContext(m.nativeDispatcher) {
                    val c0 = threads.currentThreadCpuTime
                    repeat(iterations) { m.allReduce(t, ReduceOp.Sum) }
                    cpuNanos(threads.currentThreadCpuTime - c0)
                }
            }
            return
        }
        require(comms.size == 1) { "allReduceTimed needs one rank (local1 or mpi)" }
        val c = comms[0]
        runBlocking {
            val c0 = threads.currentThreadCpuTime
            repeat(iterations) { c.allReduce(t, ReduceOp.Sum) }
            cpuNanos(threads.currentThreadCpuTime - c0)
        }
    }

    /** Closes the communicators and frees the tensors. */
    override fun close() {
        mpi?.close()
        local?.close()
        tensors.forEach { it.close() }
    }
}
