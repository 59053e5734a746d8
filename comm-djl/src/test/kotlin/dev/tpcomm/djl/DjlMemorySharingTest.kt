package dev.tpcomm.djl

import ai.djl.ndarray.NDManager
import ai.djl.ndarray.types.DataType
import ai.djl.ndarray.types.Shape
import dev.tpcomm.DType
import dev.tpcomm.Tensor
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.shouldNotBe
import io.kotest.matchers.string.shouldContain
import java.lang.foreign.MemorySegment
import java.nio.ByteBuffer
import java.nio.ByteOrder

/**
 * What DJL 0.36's PyTorch engine (CPU) shares and what it copies (the table in DjlTensors.kt), and
 * the conversions built on it.
 */
class DjlMemorySharingTest : FunSpec({
    fun address(b: ByteBuffer) = MemorySegment.ofBuffer(b).address()

    test("DJL itself: toByteBuffer() copies into a heap buffer; toByteBuffer(true) of a contiguous array shares its memory") {
        NDManager.newBaseManager().use { m ->
            val a = m.create(floatArrayOf(1f, 2f, 3f, 4f))
            a.toByteBuffer().isDirect shouldBe false
            val direct = a.toByteBuffer(true).order(ByteOrder.nativeOrder())
            direct.isDirect shouldBe true
            direct.putFloat(0, 10f)
            a.getFloat(0) shouldBe 10f // a write through the buffer is in the array
            a.addi(1f)
            direct.getFloat(4) shouldBe 3f // an in-place op on the array is in the buffer
        }
    }

    test("DJL itself: toByteBuffer(true) of a transposed array is a fresh contiguous copy each call") {
        NDManager.newBaseManager().use { m ->
            val t = m.arange(6f).reshape(2, 3).transpose()
            val first = t.toByteBuffer(true).order(ByteOrder.nativeOrder())
            address(t.toByteBuffer(true)) shouldNotBe address(first)
            first.putFloat(0, 42f)
            t.getFloat(0, 0) shouldBe 0f
        }
    }

    test("DJL itself: create(direct buffer) shares on a CPU manager; create(float array) copies") {
        NDManager.newBaseManager().use { m ->
            val buf = ByteBuffer.allocateDirect(16).order(ByteOrder.nativeOrder())
            val shared = m.create(buf, Shape(4), DataType.FLOAT32)
            buf.putFloat(8, 5f)
            shared.getFloat(2) shouldBe 5f
            shared.addi(1f)
            buf.getFloat(0) shouldBe 1f
            val values = floatArrayOf(1f, 2f)
            val copied = m.create(values)
            values[0] = 9f
            copied.getFloat(0) shouldBe 1f
        }
    }

    test("DJL itself: set(direct buffer) re-points the array at the buffer instead of copying into it") {
        NDManager.newBaseManager().use { m ->
            val a = m.zeros(Shape(4))
            val buf = ByteBuffer.allocateDirect(16).order(ByteOrder.nativeOrder())
            a.set(buf)
            address(a.toByteBuffer(true)) shouldBe address(buf)
            buf.putFloat(12, 7f)
            a.getFloat(3) shouldBe 7f
        }
    }

    test("conversions: asTensor views the array: an in-place write through the tensor is in the array") {
        NDManager.newBaseManager().use { m ->
            val a = m.create(floatArrayOf(1f, 2f, 3f, 4f, 5f, 6f), Shape(2, 3))
            val t = a.asTensor()
            t.dtype shouldBe DType.Float32
            t.shape shouldBe listOf(2, 3)
            t.setFloat(4, 50f)
            a.getFloat(1, 1) shouldBe 50f
            a.muli(2f)
            t.getFloat(0) shouldBe 2f
        }
    }

    test("conversions: asTensor refuses what it cannot view, saying what to do; toTensor copies it") {
        NDManager.newBaseManager().use { m ->
            val transposed = m.arange(6f).reshape(2, 3).transpose()
            shouldThrow<IllegalArgumentException> { transposed.asTensor() }.message shouldContain "toTensor()"
            val copy = transposed.toTensor()
            copy.shape shouldBe listOf(3, 2)
            copy.toFloatArray().toList() shouldBe listOf(0f, 3f, 1f, 4f, 2f, 5f)
            m.create(booleanArrayOf(true)).asTensor().dtype shouldBe DType.Bool // BOOLEAN maps to Bool now (it was refused before)
        }
    }

    test("conversions: toTensor copies: the tensor keeps its values after the array changes or closes") {
        NDManager.newBaseManager().use { m ->
            val a = m.create(intArrayOf(1, 2, 3))
            val t = a.toTensor()
            a.addi(10)
            a.close()
            t.dtype shouldBe DType.Int32
            t.toIntArray().toList() shouldBe listOf(1, 2, 3)
        }
    }

    test("conversions: asNDArray views the tensor both ways; toNDArray copies") {
        NDManager.newBaseManager().use { m ->
            val t = Tensor.of(doubleArrayOf(1.0, 2.0, 3.0, 4.0), 2, 2)
            val a = t.asNDArray(m)
            a.dataType shouldBe DataType.FLOAT64
            a.shape shouldBe Shape(2, 2)
            a.addi(1.0)
            t.toDoubleArray().toList() shouldBe listOf(2.0, 3.0, 4.0, 5.0)
            t.setDouble(0, -1.0)
            a.getDouble(0, 0) shouldBe -1.0
            val c = t.toNDArray(m)
            t.setDouble(1, 100.0)
            c.getDouble(0, 1) shouldBe 3.0
        }
    }

    test("conversions: an array made by asNDArray keeps the tensor's memory after the tensor is closed or forgotten") {
        NDManager.newBaseManager().use { m ->
            val arrays = (0 until 8).map { i ->
                val t = Tensor.of(FloatArray(256) { i.toFloat() })
                val a = t.asNDArray(m)
                if (i % 2 == 0) t.close() // closed: the free waits for the array
                a
            }
            // Churn the pool: freed blocks would be handed out again and overwritten here.
            repeat(20) {
                System.gc()
                repeat(200) { Tensor.zeros(DType.Float32, 256).fill(-7.0).close() }
            }
            arrays.forEachIndexed { i, a -> a.toFloatArray().all { it == i.toFloat() } shouldBe true }
        }
    }

    test("conversions: a view made by narrow converts to an array of just that range") {
        NDManager.newBaseManager().use { m ->
            val t = Tensor.of(floatArrayOf(0f, 1f, 2f, 3f, 4f, 5f), 3, 2)
            val a = t.narrow(0, 1, 2).asNDArray(m)
            a.shape shouldBe Shape(2, 2)
            a.toFloatArray().toList() shouldBe listOf(2f, 3f, 4f, 5f)
        }
    }

    test("the dtype map: every tpcomm dtype but FP8 round-trips through DJL") {
        val fp8 = setOf(DType.Float8E4M3, DType.Float8E5M2)
        for (d in DType.entries - fp8) d.toDataType().toDType() shouldBe d
        for (d in listOf(DataType.INT16, DataType.UINT32, DataType.UINT64, DataType.BOOLEAN)) d.toDType().toDataType() shouldBe d
        for (d in fp8) shouldThrow<IllegalArgumentException> { d.toDataType() }.message!! shouldContain "convert the tensor to Float16"
    }

    test("the dtype map: a DJL BOOLEAN array and a tpcomm Bool tensor share their bytes") {
        NDManager.newBaseManager().use { m ->
            val a = m.create(booleanArrayOf(true, false, true))
            val t = a.toTensor()
            t.dtype shouldBe DType.Bool
            t.toBooleanArray().toList() shouldBe listOf(true, false, true)
        }
    }

    test("the dtype map: DJL types tpcomm lacks are refused with the type and the conversion to make") {
        val cases = mapOf(
            DataType.UINT16 to "toType(DataType.INT32", DataType.COMPLEX64 to "two FLOAT32",
            DataType.STRING to "allGatherObject", DataType.UNKNOWN to "unknown",
        )
        for ((type, advice) in cases) {
            val message = shouldThrow<IllegalArgumentException> { type.toDType() }.message!!
            message shouldContain "DataType.$type has no tpcomm DType"
            message shouldContain advice
        }
    }
})
