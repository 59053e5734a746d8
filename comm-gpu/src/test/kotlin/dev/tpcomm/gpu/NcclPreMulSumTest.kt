@file:OptIn(dev.tpcomm.InternalTpcommApi::class)

package dev.tpcomm.gpu

import dev.tpcomm.CommConfig
import dev.tpcomm.DType
import dev.tpcomm.Device
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.gpu.MockPlatform.Companion.A
import dev.tpcomm.gpu.MockPlatform.Companion.COMM
import dev.tpcomm.gpu.MockPlatform.Companion.PREMUL_OP
import dev.tpcomm.gpu.MockPlatform.Companion.dev
import dev.tpcomm.gpu.sim.SimulatedGpuPlatform
import dev.tpcomm.gpu.sim.SimulatedWorld
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.mockk.every
import io.mockk.slot
import io.mockk.verify
import io.mockk.verifyOrder
import java.lang.foreign.MemorySegment
import java.lang.foreign.ValueLayout
import kotlin.time.Duration.Companion.seconds

/**
 * ReduceOp.PreMulSum on the GPU engine: native (`ncclRedOpCreatePreMulSum` per call, the scalar in
 * the tensor's dtype, host-immediate), destroyed after the launch on success and failure, on the
 * NCCL simulator (which refuses a destroyed operator and counts live ones) and on MockK doubles.
 */
class NcclPreMulSumTest : FunSpec({
    val config = CommConfig(timeout = 10.seconds)

    test("simulated world: every reducing operation with per-rank factors, and no operator left alive") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(3, config) { c ->
            val dev = Device.Cuda(c.rank)
            val f = ReduceOp.PreMulSum(0.5 * (c.rank + 1)) // 0.5, 1.0, 1.5: Σ f = 3
            val x = Tensor.of(floatArrayOf(2f, 4f, 6f, 8f, 10f, 12f), 6)
            val sum = listOf(6f, 12f, 18f, 24f, 30f, 36f)

            val t = platform.upload(x, dev)
            c.allReduce(t, f)
            platform.download(t).toFloatArray().toList() shouldBe sum

            val r = platform.upload(x, dev)
            c.reduce(r, 1, f)
            platform.download(r).toFloatArray().toList() shouldBe if (c.rank == 1) sum else x.toFloatArray().toList()

            val input = platform.upload(x, dev)
            platform.download(c.reduceScatter(input, f)).toFloatArray().toList() shouldBe sum.subList(2 * c.rank, 2 * c.rank + 2)
            platform.download(input).toFloatArray().toList() shouldBe x.toFloatArray().toList()

            val v = platform.download(c.reduceScatterV(platform.upload(x, dev), listOf(1, 2, 3), f)).toFloatArray().toList()
            v shouldBe listOf(sum.subList(0, 1), sum.subList(1, 3), sum.subList(3, 6))[c.rank]

            // Half precision: the scalar is passed in the dtype (1/3 rounded to bfloat16).
            val h = platform.upload(Tensor.zeros(DType.BFloat16, 2).also { it.setDouble(0, 3.0); it.setDouble(1, -6.0) }, dev)
            c.allReduce(h, ReduceOp.PreMulSum(1.0 / 3))
            val third = ReduceOp.PreMulSum(1.0 / 3).factorIn(DType.BFloat16)
            platform.download(h).toDoubleArray().toList() shouldBe listOf(
                ReduceOp.PreMulSum(3 * 3 * third).factorIn(DType.BFloat16), ReduceOp.PreMulSum(-6 * 3 * third).factorIn(DType.BFloat16),
            )
            // Every rank's calls returned (destroying their operators) before the barrier completes;
            // the communicators are still alive here, so a leaked operator would still be counted.
            c.barrier()
            platform.liveRedOps shouldBe 0
        }
        platform.liveRedOps shouldBe 0
        platform.assertNoMisuse()
    }

    test("a world of one scales by its factor (NCCL's one-rank kernel)") {
        val platform = SimulatedGpuPlatform()
        SimulatedWorld(platform).run(1, config) { c ->
            val t = platform.upload(Tensor.of(doubleArrayOf(1.0, -2.0), 2), Device.Cuda(0))
            c.allReduce(t, ReduceOp.PreMulSum(0.25))
            platform.download(t).toDoubleArray().toList() shouldBe listOf(0.25, -0.5)
            platform.liveRedOps shouldBe 0
        }
        platform.liveRedOps shouldBe 0
        platform.assertNoMisuse()
    }

    test("the simulator refuses an operator after ncclRedOpDestroy, a second destroy, and another datatype") {
        val platform = SimulatedGpuPlatform()
        val api = platform.api
        // A one-rank communicator driven through the raw seam.
        platform.runtime.setDevice(0) shouldBe 0
        val cell = java.lang.foreign.Arena.ofAuto().allocate(8)
        api.commInitRankConfig(cell, 1, ByteArray(NcclConnector.UNIQUE_ID_BYTES), 0, NcclCommConfig(blocking = true)) shouldBe NcclResult.SUCCESS
        val comm = cell.get(ValueLayout.JAVA_LONG, 0)
        val op = IntArray(1)
        val scalar = java.lang.foreign.Arena.ofAuto().allocate(8).also { it.set(ValueLayout.JAVA_FLOAT, 0, 0.5f) }
        api.redOpCreatePreMulSum(op, scalar, NcclDataType.of(DType.Float32)!!, NcclRedOp.SCALAR_HOST_IMMEDIATE, comm) shouldBe NcclResult.SUCCESS
        platform.liveRedOps shouldBe 1
        val stream = LongArray(1).also { platform.runtime.streamCreateNonBlocking(it) }[0]
        val buf = LongArray(1).also { platform.runtime.malloc(it, 8) }[0]
        api.allReduce(buf, buf, 1, NcclDataType.of(DType.Float64)!!, op[0], comm, stream) shouldBe NcclResult.INVALID_ARGUMENT // another datatype
        api.redOpDestroy(op[0], comm) shouldBe NcclResult.SUCCESS
        platform.liveRedOps shouldBe 0
        platform.assertNoMisuse()
        api.allReduce(buf, buf, 1, NcclDataType.of(DType.Float32)!!, op[0], comm, stream) shouldBe NcclResult.INVALID_ARGUMENT
        api.redOpDestroy(op[0], comm) shouldBe NcclResult.INVALID_ARGUMENT
        api.redOpDestroy(NcclRedOp.SUM, comm) shouldBe NcclResult.INVALID_ARGUMENT // a built-in
        platform.misuse.size shouldBe 2
        platform.misuse[0] shouldContain "not live"
    }

    test("MockK: create with the scalar in the dtype, host-immediate, then the launch, then destroy") {
        val p = MockPlatform()
        val scalar = slot<MemorySegment>()
        val seen = FloatArray(1)
        every { p.api.redOpCreatePreMulSum(any(), capture(scalar), any(), any(), any()) } answers {
            seen[0] = scalar.captured.get(ValueLayout.JAVA_FLOAT, 0)
            firstArg<IntArray>()[0] = PREMUL_OP; 0
        }
        val c = p.connect()
        c.allReduce(dev(A, DType.Float32, 4), ReduceOp.PreMulSum(0.25))
        seen[0] shouldBe 0.25f
        verifyOrder {
            p.api.redOpCreatePreMulSum(any(), any(), NcclDataType.of(DType.Float32)!!, NcclRedOp.SCALAR_HOST_IMMEDIATE, COMM)
            p.api.allReduce(A, A, 4, NcclDataType.of(DType.Float32)!!, PREMUL_OP, COMM, any())
            p.api.redOpDestroy(PREMUL_OP, COMM)
        }
        c.reduceScatter(dev(A, DType.Float32, 4), ReduceOp.PreMulSum(0.5))
        verify(exactly = 2) { p.api.redOpCreatePreMulSum(any(), any(), any(), any(), any()) }
        verify(exactly = 2) { p.api.redOpDestroy(PREMUL_OP, COMM) }
        verify(exactly = 1) { p.api.reduceScatter(any(), any(), any(), any(), PREMUL_OP, COMM, any()) }
        c.isAborted shouldBe false
    }

    test("MockK: a failed launch aborts, and the operator is not destroyed after the abort freed it with the communicator") {
        val p = MockPlatform()
        every { p.api.allReduce(any(), any(), any(), any(), any(), any(), any()) } returns NcclResult.INVALID_ARGUMENT
        val c = p.connect()
        shouldThrow<NcclException> { c.allReduce(dev(A, DType.Float32, 4), ReduceOp.PreMulSum(0.25)) }
        verifyOrder {
            p.api.redOpCreatePreMulSum(any(), any(), any(), any(), COMM)
            p.api.allReduce(any(), any(), any(), any(), PREMUL_OP, COMM, any())
            p.api.commAbort(COMM)
        }
        verify(exactly = 0) { p.api.redOpDestroy(any(), any()) }
    }

    test("MockK: a failed create aborts, launches nothing and destroys nothing") {
        val p = MockPlatform()
        every { p.api.redOpCreatePreMulSum(any(), any(), any(), any(), any()) } returns NcclResult.INVALID_ARGUMENT
        val c = p.connect()
        val e = shouldThrow<NcclException> { c.allReduce(dev(A, DType.Float32, 4), ReduceOp.PreMulSum(0.25)) }
        e.message shouldContain "ncclRedOpCreatePreMulSum failed"
        verify(exactly = 0) { p.api.allReduce(any(), any(), any(), any(), any(), any(), any()) }
        verify(exactly = 0) { p.api.redOpDestroy(any(), any()) }
    }

    test("MockK: PreMulSum on an integer tensor is refused before anything is issued") {
        val p = MockPlatform()
        val c = p.connect()
        shouldThrow<IllegalArgumentException> { c.allReduce(dev(A, DType.Int32, 4), ReduceOp.PreMulSum(0.5)) }
            .message shouldContain "PreMulSum is defined on Float32, Float64, Float16 and BFloat16 only"
        verify(exactly = 0) { p.api.redOpCreatePreMulSum(any(), any(), any(), any(), any()) }
        c.isAborted shouldBe false
    }
})
