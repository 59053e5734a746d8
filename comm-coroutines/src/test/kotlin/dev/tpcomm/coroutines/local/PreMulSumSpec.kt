package dev.tpcomm.coroutines.local

import dev.tpcomm.CollectiveMismatchException
import dev.tpcomm.DType
import dev.tpcomm.HalfPrecision
import dev.tpcomm.ReduceOp
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.FlightRecorded
import dev.tpcomm.coroutines.GradientBucket
import dev.tpcomm.coroutines.allReduceAsync
import dev.tpcomm.coroutines.allReduceCoalesced
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import kotlinx.coroutines.coroutineScope

/**
 * ReduceOp.PreMulSum from the user's side on the local backend: gradient averaging in one pass,
 * per-rank factors (NCCL creates each rank's operator from its own scalar), every reducing
 * operation, NCCL's rounding for 16-bit floats, and the refusals.
 */
class PreMulSumSpec : FunSpec({
    fun grad(rank: Int, n: Int) = Tensor.of(FloatArray(n) { (rank + 1) * 1.5f + it }, n)

    test("allReduce with PreMulSum(1 / world) averages gradients in place on every rank") {
        val world = 4
        val n = 1500 // crosses the kernel's 1024-element block
        val results = runLocalWorld(world) { comm ->
            val g = grad(comm.rank, n)
            comm.allReduce(g, ReduceOp.PreMulSum(1.0 / comm.worldSize))
            g.toFloatArray()
        }
        val mean = FloatArray(n) { i -> (0 until world).map { r -> (r + 1) * 1.5f + i }.average().toFloat() }
        for (r in 0 until world) results[r].toList() shouldBe mean.toList()
    }

    test("each rank scales by its own factor: the factors may differ across ranks") {
        val results = runLocalWorld(3) { comm ->
            val t = Tensor.of(doubleArrayOf(1.0, 2.0, 3.0), 3)
            comm.allReduce(t, ReduceOp.PreMulSum(comm.rank + 1.0))
            t.toDoubleArray().toList()
        }
        // (1 + 2 + 3) * x
        results.forEach { it shouldBe listOf(6.0, 12.0, 18.0) }
    }

    test("reduce, reduceScatter, reduceScatterV and their Into forms, allReduceAsync, allReduceCoalesced and GradientBucket take PreMulSum") {
        val world = 2
        val results = runLocalWorld(world) { comm ->
            val f = ReduceOp.PreMulSum(0.5 * (comm.rank + 1)) // 0.5 and 1.0
            val x = Tensor.of(doubleArrayOf(2.0, 4.0, 6.0, 8.0), 4)
            val reduced = comm.reduce(x.copy(), 0, f).toDoubleArray().toList()
            val input = x.copy()
            val scattered = comm.reduceScatter(input, f).toDoubleArray().toList()
            val inputAfter = input.toDoubleArray().toList()
            val into = Tensor.zeros(DType.Float64, 2).also { comm.reduceScatterInto(it, x.copy(), f) }.toDoubleArray().toList()
            val v = comm.reduceScatterV(x.copy(), listOf(1, 3), f).toDoubleArray().toList()
            val async = coroutineScope { allReduceAsync(comm, x.copy(), f).await() }.toDoubleArray().toList()
            val coalesced = comm.allReduceCoalesced(listOf(x.copy(), Tensor.of(floatArrayOf(4f), 1)), f).map { it.getDouble(0) }
            val bucket = GradientBucket(DType.Float64, listOf(listOf(4))).use { b ->
                b.tensors[0].copyFrom(x)
                b.allReduce(comm, f).tensors[0].toDoubleArray().toList()
            }
            listOf(reduced, scattered, inputAfter, into, v, async, coalesced, bucket)
        }
        // Σ f_r x = (0.5 + 1.0) x
        val sum = listOf(3.0, 6.0, 9.0, 12.0)
        results[0][0] shouldBe sum
        results[1][0] shouldBe listOf(2.0, 4.0, 6.0, 8.0) // a non-root's tensor is left unchanged
        results[0][1] shouldBe sum.subList(0, 2)
        results[1][1] shouldBe sum.subList(2, 4)
        results.forEach { it[2] shouldBe listOf(2.0, 4.0, 6.0, 8.0) } // reduceScatter's input is not written
        results[0][3] shouldBe sum.subList(0, 2)
        results[0][4] shouldBe sum.subList(0, 1)
        results[1][4] shouldBe sum.subList(1, 4)
        results.forEach { it[5] shouldBe sum }
        results.forEach { it[6] shouldBe listOf(3.0, 6.0) }
        results.forEach { it[7] shouldBe sum }
    }

    test("Float16 and BFloat16: the factor and each product are rounded to the dtype (NCCL's FuncPreMulSum), the sum once") {
        for (dtype in listOf(DType.Float16, DType.BFloat16)) {
            fun round(v: Float): Float = if (dtype == DType.Float16) HalfPrecision.float16ToFloat(HalfPrecision.floatToFloat16(v))
            else HalfPrecision.bfloat16ToFloat(HalfPrecision.floatToBFloat16(v))
            val values = floatArrayOf(1.1f, 3.3f, -7.7f, 100.25f)
            val results = runLocalWorld(3) { comm ->
                val t = Tensor.zeros(dtype, values.size)
                for (i in values.indices) t.setDouble(i.toLong(), values[i] * (comm.rank + 1.0))
                comm.allReduce(t, ReduceOp.PreMulSum(1.0 / 3))
                t.toDoubleArray().toList()
            }
            val factor = round((1.0 / 3).toFloat())
            val expected = values.indices.map { i ->
                var acc = 0f
                for (r in 0 until 3) acc += round(round(values[i] * (r + 1f)) * factor)
                round(acc).toDouble()
            }
            results.forEach { it shouldBe expected }
        }
    }

    test("an integer tensor is refused before any data moves, the tensor unchanged and the communicator usable") {
        runLocalWorld(2) { comm ->
            val t = Tensor.of(intArrayOf(1, 2), 2)
            val e = shouldThrow<IllegalArgumentException> { comm.allReduce(t, ReduceOp.PreMulSum(0.5)) }
            e.message shouldContain "PreMulSum is defined on Float32, Float64, Float16 and BFloat16 only"
            t.toIntArray().toList() shouldBe listOf(1, 2)
            comm.allReduce(t).toIntArray().toList() shouldBe listOf(2, 4)
        }
    }

    test("a non-finite factor is refused when the op is made") {
        shouldThrow<IllegalArgumentException> { ReduceOp.PreMulSum(Double.NaN) }.message shouldContain "not finite"
        shouldThrow<IllegalArgumentException> { ReduceOp.PreMulSum(Double.POSITIVE_INFINITY) }
    }

    test("PreMulSum on one rank and Sum on another is a mismatch naming the op") {
        val e = shouldThrow<CollectiveMismatchException> {
            runLocalWorld(2) { comm ->
                comm.allReduce(Tensor.of(floatArrayOf(1f), 1), if (comm.rank == 0) ReduceOp.PreMulSum(0.5) else ReduceOp.Sum)
            }
        }
        e.message shouldContain "op=PreMulSum"
    }

    test("the flight record names the op PreMulSum") {
        val ops = runLocalWorld(2) { comm ->
            comm.allReduce(Tensor.of(floatArrayOf(1f), 1), ReduceOp.PreMulSum(0.5 + comm.rank))
            (comm as FlightRecorded).flightRecorder.snapshot().last().reduceOp
        }
        ops shouldBe listOf("PreMulSum", "PreMulSum")
    }
})
