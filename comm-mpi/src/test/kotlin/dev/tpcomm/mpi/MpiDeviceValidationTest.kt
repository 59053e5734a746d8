package dev.tpcomm.mpi

import dev.tpcomm.DType
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.mpi.HostBackedStaging.Companion.onDevice
import dev.tpcomm.spi.DeviceStagingRegistry
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.assertions.withClue
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.mockk.every
import io.mockk.mockk
import io.mockk.verify

/**
 * The core's one validator runs first on every path of the MPI backend, device tensors included:
 * a bad call gets the message a host tensor gets, word for word, before any copy to the host and
 * before any MPI call, whether MPI is given device pointers (`mpi.cudaAware=Enabled`) or the
 * tensors are staged through host memory (`Disabled`). Against a mocked MPI (rank 0 of 2).
 */
class MpiDeviceValidationTest : FunSpec({
    for (mode in listOf(CudaAwareMode.Enabled, CudaAwareMode.Disabled)) {
        test("mpi.cudaAware=$mode: a bad call with a device tensor is refused with a host tensor's message, before any copy or MPI call") {
            val b = mockk<MpiBinding>(relaxed = true).also { every { it.abi } returns MpichAbi }
            val comm = mockCommunicator(b, mpi = MpiConfig(cudaAware = mode))
            val staging = HostBackedStaging()
            val keep = ArrayList<Tensor>() // the host memory behind the "device" tensors
            fun host(n: Int): Tensor = Tensor.zeros(DType.Float32, n).also { keep += it }
            fun on(device: Boolean, t: Tensor): Tensor = if (device) onDevice(t) else t

            suspend fun sameRefusal(what: String, call: suspend (device: Boolean) -> Unit) {
                val expected = shouldThrow<IllegalArgumentException> { call(false) }.message
                val got = withClue("$what with device tensors") { shouldThrow<IllegalArgumentException> { call(true) }.message }
                withClue("$what: the device tensor's message") { got shouldBe expected }
            }

            DeviceStagingRegistry.register(staging).use {
                sameRefusal("scatter with a null input on the root") { d -> comm.scatter(on(d, host(2)), null, 0) }
                sameRefusal("send with a tag above MPI_TAG_UB") { d -> comm.send(on(d, host(2)), 1, comm.tagUpperBound + 1) }
                sameRefusal("reduce to root 5") { d -> comm.reduce(on(d, host(2)), 5) }
                sameRefusal("allGatherInto with the input inside the output") { d ->
                    val output = host(4)
                    comm.allGatherInto(on(d, output), on(d, output.chunk(2)[0]))
                }
                sameRefusal("allReduce of a closed tensor") { d -> comm.allReduce(on(d, host(2)).also { it.close() }) }
                // Valid arguments, but the uneven collectives take host tensors only (no staging for them).
                val uneven = shouldThrow<IllegalArgumentException> { comm.allGatherVInto(onDevice(host(4)), onDevice(host(2)), listOf(2, 2)) }.message
                uneven shouldBe "allGatherV: the MPI backend runs the uneven collectives on host tensors only, but a tensor is on Cuda(index=0); " +
                    "copy it to the host first, or use the NCCL/RCCL backend"
                // Refused as every other bad argument: before the call is recorded or numbered (as for reduceScatterV and allToAllV).
                shouldThrow<IllegalArgumentException> { comm.reduceScatterV(onDevice(host(4)), listOf(2, 2)) }.message shouldBe
                    "reduceScatterV: the MPI backend runs the uneven collectives on host tensors only, but a tensor is on Cuda(index=0); " +
                    "copy it to the host first, or use the NCCL/RCCL backend"
                shouldThrow<IllegalArgumentException> { comm.allToAllVInto(host(4), onDevice(host(4)), listOf(2, 2), listOf(2, 2)) }
                withClue("flight records of the refused uneven calls") { comm.flightRecorder.snapshot().map { "${it.operation} #${it.sequence} ${it.state}" } shouldBe emptyList() }
                withClue("copies between device and host") { staging.counts shouldBe (0 to 0) }
            }
            verify(exactly = 0) { b.scatter(any(), any(), any(), any(), any(), any(), any(), any()) }
            verify(exactly = 0) { b.isend(any(), any(), any(), any(), any(), any(), any()) }
            verify(exactly = 0) { b.reduce(any(), any(), any(), any(), any(), any(), any()) }
            verify(exactly = 0) { b.allgather(any(), any(), any(), any(), any(), any(), any()) }
            comm.isAborted shouldBe false
            comm.close()
        }
    }

    test("mpi.cudaAware=Enabled: an operation that works on the host around MPI is refused on a device pointer before it is recorded; along dim 0 it goes to MPI") {
        val keep = ArrayList<Tensor>() // the host memory behind the "device" tensors
        fun dev(vararg shape: Int, dtype: DType = DType.Float32): Tensor = onDevice(Tensor.zeros(dtype, *shape).also { keep += it })
        val suffix = ", which needs a host tensor, but the tensor is on Cuda(index=0); copy it to the host first, " +
            "or set mpi.cudaAware=Disabled to have device tensors staged through host memory (docs/mpi.md)"
        val b = mockk<MpiBinding>(relaxed = true).also { every { it.abi } returns MpichAbi }
        val comm = mockCommunicator(b, mpi = MpiConfig(cudaAware = CudaAwareMode.Enabled))
        val cases: List<Pair<String, suspend () -> Unit>> = listOf(
            "allReduce: PreMulSum scales on the host before the MPI sum" to { comm.allReduce(dev(4), ReduceOp.PreMulSum(0.5)) },
            "allReduce: Avg divides on the host after the MPI sum" to { comm.allReduce(dev(4), ReduceOp.Avg) },
            "allReduce: this reduction runs on the host" to { comm.allReduce(dev(4, dtype = DType.Float16)) },
            "reduce: PreMulSum scales on the host before the MPI sum" to { comm.reduce(dev(4), 0, ReduceOp.PreMulSum(0.5)) },
            "reduce: Avg divides on the host after the MPI sum" to { comm.reduce(dev(4), 0, ReduceOp.Avg) },
            "allGather: gathering along dim 1 rearranges on the host" to { comm.allGather(dev(2, 2), dim = 1) },
            "allGather: gathering along dim 1 rearranges on the host" to { comm.allGatherInto(dev(2, 4), dev(2, 2), dim = 1) },
            "reduceScatter: this reduce-scatter finishes on the host" to { comm.reduceScatter(dev(2, 4), dim = 1) },
            "reduceScatter: this reduction runs on the host" to { comm.reduceScatter(dev(4, dtype = DType.BFloat16)) },
            "gather: gathering along dim 1 rearranges on the host" to { comm.gather(dev(2, 2), 0, dim = 1) },
            "scatter: scattering along dim 1 rearranges on the host" to { comm.scatter(dev(2, 2), dev(2, 4), 0, dim = 1) },
            "allToAll: all-to-all along dim 1 rearranges on the host" to { comm.allToAll(dev(2, 4), dim = 1) },
        )
        for ((message, call) in cases) {
            withClue(message) { shouldThrow<IllegalArgumentException> { call() }.message shouldBe message + suffix }
        }
        // Refused as every other bad argument: nothing recorded, no number taken, nothing given to MPI.
        comm.flightRecorder.snapshot().map { "${it.operation} #${it.sequence} ${it.state}" } shouldBe emptyList()
        verify(exactly = 0) { b.allreduce(any(), any(), any(), any(), any(), any()) }
        verify(exactly = 0) { b.allgather(any(), any(), any(), any(), any(), any(), any()) }
        // The same operations along dim 0, or without host work, go to MPI as device pointers.
        comm.allReduce(dev(4))
        comm.allGather(dev(2, 2))
        comm.flightRecorder.snapshot().map { "${it.operation} #${it.sequence} ${it.state}" } shouldBe listOf("allReduce #1 Completed", "allGather #2 Completed")
        comm.close()
    }
})
