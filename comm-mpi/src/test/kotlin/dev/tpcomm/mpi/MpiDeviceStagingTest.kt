package dev.tpcomm.mpi

import dev.tpcomm.CommConfig
import dev.tpcomm.CommunicationException
import dev.tpcomm.CommunicatorAbortedException
import dev.tpcomm.Device
import dev.tpcomm.Tensor
import dev.tpcomm.engine.NativeDispatcher
import dev.tpcomm.mpi.HostBackedStaging.Companion.onDevice
import dev.tpcomm.spi.DeviceStagingRegistry
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.shouldNotBe
import io.kotest.matchers.string.shouldContain
import io.kotest.matchers.string.shouldNotContain
import io.kotest.matchers.types.shouldBeSameInstanceAs
import io.mockk.every
import io.mockk.mockk
import io.mockk.slot
import io.mockk.verify

/**
 * Staging of device tensors against a mocked MPI (MPICH ABI, rank 0 of 2): which tensors are
 * staged, the refusal without a staging, and the failure paths (what is thrown, whether the
 * communicator stays usable, whether the host temporaries are freed). Results and copy directions
 * of every operation under real MPI: [MpiStagingJobsTest].
 */
class MpiDeviceStagingTest : FunSpec({
    fun binding(): MpiBinding = mockk<MpiBinding>(relaxed = true).also { b -> every { b.abi } returns MpichAbi }

    fun communicator(b: MpiBinding, mpi: MpiConfig = MpiConfig(cudaAware = CudaAwareMode.Disabled), cudaSupport: Int = -1): MpiCommunicator =
        mockCommunicator(b, mpi = mpi, cudaSupport = cudaSupport)

    test("with no staging registered a device tensor is refused before any MPI call, saying how to register one") {
        val b = binding()
        val comm = communicator(b, cudaSupport = 0)
        val host = Tensor.of(floatArrayOf(1f, 2f))
        val e = shouldThrow<IllegalArgumentException> { comm.allReduce(onDevice(host)) }
        e.message shouldContain "allReduce: the tensor is on Cuda(index=0)"
        e.message shouldContain "MPIX_Query_cuda_support returned 0; mpi.cudaAware=Disabled"
        e.message shouldContain "DeviceStagingRegistry.register"
        e.message shouldContain "comm-nccl"
        e.message shouldContain "mpi.cudaAware=Enabled"
        val rocm = shouldThrow<IllegalArgumentException> { comm.send(onDevice(host, Device.Rocm(1)), 1, 0) }
        rocm.message shouldContain "send: the tensor is on Rocm(index=1), but MPI is only ever given CUDA device pointers"
        rocm.message shouldContain "comm-rccl"
        rocm.message shouldNotContain "mpi.cudaAware=Enabled"
        verify(exactly = 0) { b.allreduce(any(), any(), any(), any(), any(), any()) }
        verify(exactly = 0) { b.isend(any(), any(), any(), any(), any(), any(), any()) }
        comm.isAborted shouldBe false
        comm.passesDevicePointers shouldBe false
        comm.close()
    }

    test("a staged all-reduce gives MPI a host temporary, copies in and out once, and frees the temporary") {
        val b = binding()
        val buffer = slot<Long>()
        every { b.allreduce(any(), capture(buffer), any(), any(), any(), any()) } returns 0
        val comm = communicator(b)
        val staging = HostBackedStaging()
        DeviceStagingRegistry.register(staging).use {
            val host = Tensor.of(floatArrayOf(1f, 2f, 3f))
            val device = onDevice(host)
            comm.allReduce(device) shouldBeSameInstanceAs device
            buffer.captured shouldNotBe host.segment.address()
            staging.counts shouldBe (1 to 1)
            staging.liveTemporaries shouldBe 0
            host.toFloatArray().toList() shouldBe listOf(1f, 2f, 3f) // the mock moved nothing: the copy back restored the bytes
        }
        comm.close()
    }

    test("with mpi.cudaAware=Enabled CUDA tensors go to MPI as device pointers; ROCm tensors are still staged") {
        val b = binding()
        val buffers = mutableListOf<Long>()
        every { b.allreduce(any(), capture(buffers), any(), any(), any(), any()) } returns 0
        val comm = communicator(b, MpiConfig(cudaAware = CudaAwareMode.Enabled))
        comm.passesDevicePointers shouldBe true
        val staging = HostBackedStaging()
        DeviceStagingRegistry.register(staging).use {
            val host = Tensor.of(floatArrayOf(1f, 2f))
            comm.allReduce(onDevice(host, Device.Cuda(0)))
            buffers.last() shouldBe host.segment.address()
            staging.counts shouldBe (0 to 0)
            comm.allReduce(onDevice(host, Device.Rocm(0)))
            buffers.last() shouldNotBe host.segment.address()
            staging.counts shouldBe (1 to 1)
            // An operation that finishes on the host refuses a device pointer, pointing at staging.
            val avg = shouldThrow<IllegalArgumentException> { comm.allReduce(onDevice(host, Device.Cuda(0)), dev.tpcomm.ReduceOp.Avg) }
            avg.message shouldContain "Avg divides on the host"
            avg.message shouldContain "set mpi.cudaAware=Disabled to have device tensors staged"
        }
        comm.close()
    }

    test("a failed copy to the host: CommunicationException naming the copy, the communicator aborted, the temporaries freed") {
        val b = binding()
        val comm = communicator(b)
        val staging = HostBackedStaging()
        DeviceStagingRegistry.register(staging).use {
            staging.failToHost = "CUDA memcpyAsync failed with error 700: an illegal memory access was encountered"
            val host = Tensor.of(floatArrayOf(5f, 6f))
            val e = shouldThrow<CommunicationException> { comm.allReduce(onDevice(host)) }
            e.message shouldContain "copying the Float32[2] input from Cuda(index=0) to host memory with host-backed test staging failed"
            e.message shouldContain "error 700: an illegal memory access"
            e.message shouldContain "the communicator is aborted"
            e.operation shouldBe "allReduce"
            e.cause!!.message shouldContain "error 700"
            verify(exactly = 0) { b.allreduce(any(), any(), any(), any(), any(), any()) }
            staging.liveTemporaries shouldBe 0
            comm.isAborted shouldBe true
            shouldThrow<CommunicatorAbortedException> { comm.barrier() }
            host.toFloatArray().toList() shouldBe listOf(5f, 6f)
        }
        comm.close()
    }

    test("a failed copy back: CommunicationException, the communicator stays usable, the temporaries freed") {
        val b = binding()
        val comm = communicator(b)
        val staging = HostBackedStaging()
        DeviceStagingRegistry.register(staging).use {
            staging.failToDevice = "HIP hipMemcpyAsync failed with error 1: invalid argument"
            val host = Tensor.of(intArrayOf(1, 2, 3, 4), 2, 2)
            val e = shouldThrow<CommunicationException> { comm.broadcast(onDevice(host, Device.Rocm(0)), 1) }
            e.message shouldContain "the operation completed, but copying its Int32[2, 2] result back to Rocm(index=0)"
            e.message shouldContain "invalid argument"
            e.message shouldContain "the communicator stays usable"
            staging.counts shouldBe (0 to 1) // rank 0 is not the root: nothing to copy in
            staging.liveTemporaries shouldBe 0
            comm.isAborted shouldBe false
            staging.reset()
            comm.broadcast(onDevice(host, Device.Rocm(0)), 0)
            staging.counts shouldBe (1 to 0) // the root only reads its tensor
        }
        comm.close()
    }

    test("a bad argument to a staged call fails as for host tensors, copies nothing back and frees the temporaries") {
        val b = binding()
        val comm = communicator(b)
        val staging = HostBackedStaging()
        DeviceStagingRegistry.register(staging).use {
            val host = Tensor.of(floatArrayOf(1f, 2f, 3f))
            val e = shouldThrow<IllegalArgumentException> { comm.reduce(onDevice(host), 5) }
            e.message shouldContain "root 5 is out of range"
            staging.toDevice.get() shouldBe 0
            staging.liveTemporaries shouldBe 0
            val closed = onDevice(host).also { it.close() }
            shouldThrow<IllegalArgumentException> { comm.allReduce(closed) }.message shouldContain "the tensor was closed"
            comm.isAborted shouldBe false
        }
        comm.close()
    }

    test("an MPI failure inside a staged call breaks the communicator and keeps the temporaries (MPI may still touch them)") {
        val b = binding()
        every { b.allreduce(any(), any(), any(), any(), any(), any()) } returns 15
        every { b.errorString(any(), any(), any()) } returns 1
        val comm = communicator(b)
        val staging = HostBackedStaging()
        DeviceStagingRegistry.register(staging).use {
            val host = Tensor.of(floatArrayOf(1f))
            shouldThrow<CommunicationException> { comm.allReduce(onDevice(host)) }.message shouldContain "MPI error 15"
            comm.isAborted shouldBe true
            staging.counts shouldBe (1 to 0)
            staging.liveTemporaries shouldBe 1
        }
        comm.close()
    }
})
