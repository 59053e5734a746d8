package dev.tpcomm.mpi.jobs

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.mpi.CudaAwareMode
import dev.tpcomm.mpi.HostBackedStaging
import dev.tpcomm.mpi.HostBackedStaging.Companion.onDevice
import dev.tpcomm.mpi.MpiBackendFactory
import dev.tpcomm.mpi.MpiCommunicator
import dev.tpcomm.mpi.MpiConfig
import dev.tpcomm.mpi.MpiProgress
import dev.tpcomm.spi.DeviceStagingRegistry
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking
import java.nio.file.Path
import kotlin.system.exitProcess
import kotlin.time.Duration.Companion.seconds

/**
 * One rank of a staging job (`MpiStagingMain <outDir>`, under mpirun or alone as an MPI singleton):
 * every operation on "device" tensors (host memory behind [HostBackedStaging], with
 * `mpi.cudaAware=Disabled`) must give the host tensors' results, with copies only in the directions
 * the operation needs and every host temporary freed. Writes `rank-<r>.tsv` ([CaseReports]); exits 0.
 */
object MpiStagingMain {
    private class CaseFailed(message: String) : AssertionError(message)

    const val ALL_REDUCE: String = "allReduce (MPI and host-finished reductions)"
    const val ALL_REDUCE_ROCM: String = "allReduce of a ROCm tensor"
    const val BROADCAST: String = "broadcast: the root copies in only, the others copy out only"
    const val REDUCE: String = "reduce: every rank copies in, only the root copies out"
    const val ALL_GATHER_INTO: String = "allGatherInto along dims 0 and 1, device input and output"
    const val ALL_GATHER: String = "allGather of a device input returns a host tensor; host input with device output copies out only"
    const val REDUCE_SCATTER: String = "reduceScatterInto along dims 0 and 1, Sum and Avg"
    const val GATHER: String = "gather to rank 0 along dim 1: copies in only, the root gets a host tensor"
    const val SCATTER: String = "scatter from rank 0: the root copies in and out, the others out only"
    const val ALL_TO_ALL: String = "allToAll along dims 0 and 1: copies in only, returns a host tensor"
    const val SEND_RECV: String = "send copies in only, recv copies out only (ring)"
    const val CUDA_AWARE_ENABLED: String = "mpi.cudaAware=Enabled: CUDA tensors go to MPI directly, ROCm tensors are staged"
    const val BAD_ARGUMENT: String = "a bad argument to a staged call fails on every rank before any data moves"
    const val COPY_BACK_FAILS: String = "a failed copy back on every rank: a clear error, the communicator stays usable"
    const val NOTHING_REGISTERED: String = "with no staging registered a device tensor is refused, saying how to register one"
    const val COPY_IN_FAILS: String = "a failed copy to the host on every rank aborts the communicator and frees the temporaries"

    /** Every case, in the order the job runs them. */
    val CASES: List<String> = listOf(ALL_REDUCE, ALL_REDUCE_ROCM, BROADCAST, REDUCE, ALL_GATHER_INTO, ALL_GATHER, REDUCE_SCATTER, GATHER, SCATTER, ALL_TO_ALL, SEND_RECV, CUDA_AWARE_ENABLED, BAD_ARGUMENT, COPY_BACK_FAILS, NOTHING_REGISTERED, COPY_IN_FAILS)

    @JvmStatic
    fun main(args: Array<String>) {
        val out = Path.of(args[0])
        val outcomes = ArrayList<CaseOutcome>()
        runBlocking {
            val base = CommConfig.fromEnvironment()
            val comm = MpiBackendFactory().create(
                base.copy(timeout = 30.seconds, options = base.options + (MpiConfig.CUDA_AWARE to "Disabled")),
            ) as MpiCommunicator
            val r = comm.rank
            val ws = comm.worldSize
            val fake = HostBackedStaging()
            var registration = DeviceStagingRegistry.register(fake)

            fun fail(what: String): Nothing = throw CaseFailed(what)

            fun values(dtype: DType, vararg shape: Int, rank: Int = r): Tensor {
                val n = shape.fold(1) { a, b -> a * b }
                return Tensor.fromDoubles(dtype, DoubleArray(n) { ((rank + 1) * 10 + it).toDouble() }, *shape)
            }

            fun same(actual: Tensor?, expected: Tensor?, what: String) {
                if (actual == null || expected == null) {
                    if (actual !== expected) fail("$what: got $actual, expected $expected")
                    return
                }
                if (actual.device != Device.Host) fail("$what: the result is on ${actual.device}, expected a host tensor")
                if (!actual.contentEquals(expected)) {
                    fail("$what: got ${actual.toDoubleArray().toList()} ${actual.shape}, expected ${expected.toDoubleArray().toList()} ${expected.shape}")
                }
            }

            suspend fun <T> staged(copiesIn: Int, copiesOut: Int, what: String, block: suspend () -> T): T {
                fake.reset()
                val result = block()
                if (fake.counts != (copiesIn to copiesOut)) {
                    fail("$what: (copies to host, copies to device) = ${fake.counts}, expected ${copiesIn to copiesOut}")
                }
                if (fake.liveTemporaries != 0) fail("$what: ${fake.liveTemporaries} host temporaries were not freed")
                return result
            }

            suspend fun case(name: String, block: suspend () -> Unit) {
                val outcome = try {
                    block()
                    CaseOutcome(name, "Passed", "")
                } catch (e: Throwable) {
                    System.err.println("rank $r: FAILED $name: $e")
                    CaseOutcome(name, "Failed", e.stackTraceToString())
                }
                outcomes += outcome
            }

            case(ALL_REDUCE) {
                for ((dt, op) in listOf(DType.Float32 to ReduceOp.Sum, DType.Float64 to ReduceOp.Avg, DType.Float16 to ReduceOp.Max, DType.Int8 to ReduceOp.Sum)) {
                    val ref = values(dt, 2, 3).also { comm.allReduce(it, op) }
                    val h = values(dt, 2, 3)
                    val d = onDevice(h)
                    val back = staged(1, 1, "allReduce $dt $op") { comm.allReduce(d, op) }
                    if (back !== d) fail("allReduce returned another tensor than its argument")
                    same(h, ref, "allReduce $dt $op")
                }
            }

            case(ALL_REDUCE_ROCM) {
                val ref = values(DType.Int64, 5).also { comm.allReduce(it, ReduceOp.Max) }
                val h = values(DType.Int64, 5)
                staged(1, 1, "allReduce Rocm") { comm.allReduce(onDevice(h, Device.Rocm(0)), ReduceOp.Max) }
                same(h, ref, "allReduce Rocm")
            }

            case(BROADCAST) {
                val root = ws - 1
                val ref = values(DType.Int32, 3, 2).also { comm.broadcast(it, root) }
                val h = values(DType.Int32, 3, 2)
                if (r == root) staged(1, 0, "broadcast root") { comm.broadcast(onDevice(h), root) }
                else staged(0, 1, "broadcast non-root") { comm.broadcast(onDevice(h), root) }
                same(h, ref, "broadcast")
            }

            case(REDUCE) {
                val ref = values(DType.Float64, 4).also { comm.reduce(it, 0, ReduceOp.Sum) }
                val h = values(DType.Float64, 4)
                staged(1, if (r == 0) 1 else 0, "reduce") { comm.reduce(onDevice(h), 0, ReduceOp.Sum) }
                same(h, ref, "reduce")
            }

            case(ALL_GATHER_INTO) {
                for (dim in 0..1) {
                    val outShape = if (dim == 0) intArrayOf(2 * ws, 3) else intArrayOf(2, 3 * ws)
                    val ref = Tensor.zeros(DType.Float32, *outShape).also { comm.allGatherInto(it, values(DType.Float32, 2, 3), dim) }
                    val input = values(DType.Float32, 2, 3)
                    val output = Tensor.zeros(DType.Float32, *outShape)
                    val d = onDevice(output)
                    val back = staged(1, 1, "allGatherInto dim $dim") { comm.allGatherInto(d, onDevice(input), dim) }
                    if (back !== d) fail("allGatherInto returned another tensor than its output")
                    same(output, ref, "allGatherInto dim $dim")
                    same(input, values(DType.Float32, 2, 3), "allGatherInto's input")
                }
            }

            case(ALL_GATHER) {
                val ref = comm.allGather(values(DType.Int32, 2, 2), 1)
                val res = staged(1, 0, "allGather") { comm.allGather(onDevice(values(DType.Int32, 2, 2)), 1) }
                same(res, ref, "allGather")
                val output = Tensor.zeros(DType.Int32, 2, 2 * ws)
                staged(0, 1, "allGatherInto to a device output") { comm.allGatherInto(onDevice(output), values(DType.Int32, 2, 2), 1) }
                same(output, ref, "allGatherInto to a device output")
            }

            case(REDUCE_SCATTER) {
                for ((dim, op) in listOf(0 to ReduceOp.Sum, 1 to ReduceOp.Avg)) {
                    val inShape = if (dim == 0) intArrayOf(2 * ws, 3) else intArrayOf(2, 3 * ws)
                    val ref = Tensor.zeros(DType.Float64, 2, 3).also { comm.reduceScatterInto(it, values(DType.Float64, *inShape), op, dim) }
                    val output = Tensor.zeros(DType.Float64, 2, 3)
                    val input = values(DType.Float64, *inShape)
                    staged(1, 1, "reduceScatterInto dim $dim") { comm.reduceScatterInto(onDevice(output), onDevice(input), op, dim) }
                    same(output, ref, "reduceScatterInto dim $dim $op")
                }
            }

            case(GATHER) {
                val ref = comm.gather(values(DType.Float32, 2, 3), 0, 1)
                val res = staged(1, 0, "gather") { comm.gather(onDevice(values(DType.Float32, 2, 3)), 0, 1) }
                same(res, ref, "gather")
            }

            case(SCATTER) {
                val refIn = if (r == 0) values(DType.Float32, 2 * ws, 3) else null
                val ref = Tensor.zeros(DType.Float32, 2, 3).also { comm.scatter(it, refIn, 0, 0) }
                for (othersPassInput in listOf(false, true)) {
                    val output = Tensor.zeros(DType.Float32, 2, 3)
                    val input = if (r == 0 || othersPassInput) values(DType.Float32, 2 * ws, 3, rank = 0) else null
                    val expectedIn = if (r == 0) 1 else 0
                    staged(expectedIn, 1, "scatter (others pass an input: $othersPassInput)") {
                        comm.scatter(onDevice(output), input?.let { onDevice(it) }, 0, 0)
                    }
                    same(output, ref, "scatter")
                }
            }

            case(ALL_TO_ALL) {
                for (dim in 0..1) {
                    val shape = if (dim == 0) intArrayOf(2 * ws, 2) else intArrayOf(2, 2 * ws)
                    val ref = comm.allToAll(values(DType.Int32, *shape), dim)
                    val res = staged(1, 0, "allToAll dim $dim") { comm.allToAll(onDevice(values(DType.Int32, *shape)), dim) }
                    same(res, ref, "allToAll dim $dim")
                }
            }

            case(SEND_RECV) {
                val next = (r + 1) % ws
                val prev = (r - 1 + ws) % ws
                val expected = values(DType.Float32, 5, rank = prev)
                val hostIn = Tensor.zeros(DType.Float32, 5)
                staged(1, 0, "device send, host recv") {
                    coroutineScope {
                        launch { comm.send(onDevice(values(DType.Float32, 5)), next, 3) }
                        comm.recv(hostIn, prev, 3)
                    }
                }
                same(hostIn, expected, "host recv of a device send")
                val deviceIn = Tensor.zeros(DType.Float32, 5)
                val info = staged(0, 1, "host send, device recv") {
                    coroutineScope {
                        launch { comm.send(values(DType.Float32, 5), next, 4) }
                        comm.recv(onDevice(deviceIn), prev, 4)
                    }
                }
                if (info.source != prev || info.tag != 4 || info.byteSize != 20L) fail("recv's MessageInfo is $info")
                same(deviceIn, expected, "device recv of a host send")
            }

            case(CUDA_AWARE_ENABLED) {
                val dup = comm.duplicate(mpi = comm.mpiConfig.copy(cudaAware = CudaAwareMode.Enabled))
                try {
                    if (!dup.passesDevicePointers) fail("passesDevicePointers is false with cudaAware=Enabled")
                    val ref = values(DType.Float32, 4).also { dup.allReduce(it) }
                    val cuda = values(DType.Float32, 4)
                    staged(0, 0, "Enabled, CUDA") { dup.allReduce(onDevice(cuda, Device.Cuda(0))) }
                    same(cuda, ref, "Enabled, CUDA")
                    val rocm = values(DType.Float32, 4)
                    staged(1, 1, "Enabled, ROCm") { dup.allReduce(onDevice(rocm, Device.Rocm(0))) }
                    same(rocm, ref, "Enabled, ROCm")
                } finally {
                    dup.close()
                }
            }

            case(BAD_ARGUMENT) {
                fake.reset()
                val e = failureOf<IllegalArgumentException> { comm.broadcast(onDevice(values(DType.Float32, 2)), ws) }
                if (e == null || "out of range" !in e.message.orEmpty()) fail("expected the root check's IllegalArgumentException, got $e")
                if (fake.toDevice.get() != 0 || fake.liveTemporaries != 0) fail("copies back ${fake.toDevice.get()}, live temporaries ${fake.liveTemporaries}")
                comm.barrier()
            }

            case(COPY_BACK_FAILS) {
                fake.reset()
                fake.failToDevice = "simulated copy failure"
                val e = failureOf<CommunicationException> { comm.allReduce(onDevice(values(DType.Float32, 3))) }
                if (e == null || "copying its Float32[3] result back to Cuda(index=0)" !in e.message.orEmpty()) fail("expected the copy-back failure, got $e")
                if (comm.isAborted) fail("the communicator broke on a failed copy back")
                if (fake.liveTemporaries != 0) fail("${fake.liveTemporaries} host temporaries were not freed")
                fake.reset()
                val ref = values(DType.Float32, 3).also { comm.allReduce(it) }
                val h = values(DType.Float32, 3)
                staged(1, 1, "allReduce after a failed copy back") { comm.allReduce(onDevice(h)) }
                same(h, ref, "allReduce after a failed copy back")
            }

            case(NOTHING_REGISTERED) {
                registration.close()
                try {
                    val e = failureOf<IllegalArgumentException> { comm.allReduce(onDevice(values(DType.Float32, 3))) }
                    val m = e?.message.orEmpty()
                    if ("DeviceStagingRegistry.register" !in m || "comm-nccl" !in m || "mpi.cudaAware=Disabled" !in m) fail("expected the refusal, got $e")
                    comm.barrier()
                } finally {
                    registration = DeviceStagingRegistry.register(fake)
                }
            }

            case(COPY_IN_FAILS) {
                val dup = comm.duplicate(mpi = comm.mpiConfig.copy(abortOnTimeout = false, progress = MpiProgress.NonBlocking))
                try {
                    fake.reset()
                    fake.failToHost = "simulated copy failure"
                    val e = failureOf<CommunicationException> { dup.allReduce(onDevice(values(DType.Float32, 3))) }
                    if (e == null || "to host memory with host-backed test staging failed" !in e.message.orEmpty()) fail("expected the copy-in failure, got $e")
                    if (!dup.isAborted) fail("the communicator is usable after a failed copy in")
                    if (fake.liveTemporaries != 0) fail("${fake.liveTemporaries} host temporaries were not freed")
                    val later = failureOf<CommunicatorAbortedException> { dup.barrier() }
                    if (later == null) fail("a later call on the aborted communicator succeeded")
                } finally {
                    fake.reset()
                    dup.close()
                }
            }

            registration.close()
            CaseReports.write(out, r, outcomes)
            comm.close()
        }
        exitProcess(0)
    }
}

/** The [T] that [block] throws, or null when it returns normally (other exceptions propagate). */
private inline fun <reified T : Throwable> failureOf(block: () -> Unit): T? =
    try {
        block()
        null
    } catch (e: Throwable) {
        if (e is T) e else throw e
    }
