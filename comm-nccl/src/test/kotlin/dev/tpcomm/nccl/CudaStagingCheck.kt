package dev.tpcomm.nccl

import dev.tpcomm.CommConfig
import dev.tpcomm.Communicator
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.DeviceCopies
import dev.tpcomm.mpi.MpiBackendFactory
import dev.tpcomm.mpi.MpiConfig
import dev.tpcomm.nccl.javacpp.JavaCppPlatform
import dev.tpcomm.spi.DeviceStagingRegistry
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.launch

/**
 * The MPI backend's staging of CUDA tensors through the real CUDA runtime (`gpu-check mpi-staging`,
 * one process per rank under `mpirun`, every rank on GPU 0): comm-nccl's [CudaStagingProvider],
 * found by `ServiceLoader`, copies each device tensor to host memory for MPI and the results back
 * (`mpi.cudaAware=Disabled`, as with an MPI built without CUDA). Each case uploads fresh device
 * tensors, calls the collective as a user does, downloads the result and compares it with what the
 * host computes. Prints one line per case on every rank and returns the number that failed.
 */
@OptIn(dev.tpcomm.InternalTpcommApi::class)
internal object CudaStagingCheck {
    suspend fun run(base: CommConfig): Int {
        val registered = DeviceStagingRegistry.find(Device.Cuda(0))
        println("mpi-staging: staging for Cuda(0): ${registered?.javaClass?.name ?: "none"}; unavailable: ${DeviceStagingRegistry.unavailable}")
        val comm: Communicator = MpiBackendFactory().create(base.copy(options = base.options + (MpiConfig.CUDA_AWARE to "Disabled")))
        val r = comm.rank
        val n = comm.worldSize
        val copies = try {
            DeviceCopies(JavaCppPlatform.runtime(), Device.Cuda(0))
        } catch (t: Throwable) {
            println("mpi-staging rank $r: FAILED  the CUDA runtime: $t")
            comm.close()
            return 1
        }
        var failed = 0
        suspend fun case(name: String, body: suspend () -> String) {
            val line = try {
                "ok      $name: ${body()}"
            } catch (t: Throwable) {
                failed++
                "FAILED  $name: ${t.javaClass.name}: ${t.message}"
            }
            println("mpi-staging rank $r: $line")
        }
        fun values(dtype: DType, count: Int, rank: Int = r) = Tensor.fromDoubles(dtype, DoubleArray(count) { ((rank + 1) * 10 + it).toDouble() })
        fun expect(actual: Tensor, expected: List<Double>, what: String): String {
            check(actual.device == Device.Host) { "$what: downloaded to ${actual.device}" }
            val got = actual.toDoubleArray().toList()
            check(got == expected) { "$what: got $got, expected $expected" }
            return "$got"
        }
        try {
            case("allReduce Float32 Sum of a device tensor") {
                val t = copies.upload(values(DType.Float32, 5))
                val back = comm.allReduce(t, ReduceOp.Sum)
                check(back === t) { "allReduce returned another tensor" }
                expect(copies.download(t), List(5) { i -> (0 until n).sumOf { ((it + 1) * 10 + i).toDouble() } }, "allReduce")
            }
            case("allReduce Int64 Max and Float64 Avg") {
                val a = copies.upload(values(DType.Int64, 3))
                comm.allReduce(a, ReduceOp.Max)
                val b = copies.upload(values(DType.Float64, 3))
                comm.allReduce(b, ReduceOp.Avg)
                expect(copies.download(a), List(3) { i -> (n * 10 + i).toDouble() }, "Max") + " " +
                    expect(copies.download(b), List(3) { i -> (0 until n).sumOf { ((it + 1) * 10 + i).toDouble() } / n }, "Avg")
            }
            case("broadcast from the last rank") {
                val t = copies.upload(values(DType.Float32, 4))
                comm.broadcast(t, n - 1)
                expect(copies.download(t), List(4) { i -> (n * 10 + i).toDouble() }, "broadcast")
            }
            case("allGatherInto a device output along dim 0") {
                val out = copies.upload(Tensor.zeros(DType.Float32, 2 * n))
                comm.allGatherInto(out, copies.upload(values(DType.Float32, 2)))
                expect(copies.download(out), (0 until n).flatMap { k -> List(2) { i -> ((k + 1) * 10 + i).toDouble() } }, "allGatherInto")
            }
            case("reduceScatterInto a device output") {
                val out = copies.upload(Tensor.zeros(DType.Float32, 2))
                comm.reduceScatterInto(out, copies.upload(values(DType.Float32, 2 * n)))
                expect(copies.download(out), List(2) { i -> (0 until n).sumOf { ((it + 1) * 10 + r * 2 + i).toDouble() } }, "reduceScatterInto")
            }
            case("send and recv of device tensors around a ring") {
                val got = copies.upload(Tensor.zeros(DType.Float32, 3))
                coroutineScope {
                    launch { comm.send(copies.upload(values(DType.Float32, 3)), (r + 1) % n) }
                    comm.recv(got, (r + n - 1) % n)
                }
                expect(copies.download(got), List(3) { i -> (((r + n - 1) % n + 1) * 10 + i).toDouble() }, "recv")
            }
            case("a 64 MiB all-reduce") {
                val count = 16 shl 20
                val t = copies.upload(Tensor.fromDoubles(DType.Float32, DoubleArray(count) { (it % 7).toDouble() + r }))
                comm.allReduce(t)
                val d = copies.download(t).toFloatArray()
                for (i in 0 until count step 4099) check(d[i] == ((i % 7) * n + (0 until n).sum()).toFloat()) { "element $i is ${d[i]}" }
                "sampled every 4,099th element"
            }
        } finally {
            comm.close()
        }
        println("mpi-staging rank $r: ${if (failed == 0) "passed" else "$failed case(s) FAILED"}")
        return failed
    }
}
