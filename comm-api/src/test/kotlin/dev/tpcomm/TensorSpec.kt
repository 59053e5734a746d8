package dev.tpcomm

import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainExactly
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import io.kotest.property.Arb
import io.kotest.property.arbitrary.enum
import io.kotest.property.arbitrary.int
import io.kotest.property.arbitrary.list
import io.kotest.property.checkAll
import java.lang.foreign.Arena

class TensorSpec : FunSpec({
    test("factories allocate 64-byte aligned, zeroed, row-major memory") {
        val t = Tensor.zeros(DType.Float32, 3, 5)
        t.shape shouldContainExactly listOf(3, 5)
        t.numel shouldBe 15
        t.byteSize shouldBe 60
        (t.segment.address() % 64) shouldBe 0
        t.toFloatArray().all { it == 0f } shouldBe true
        t.stride(0) shouldBe 5
        t.stride(1) shouldBe 1
    }

    test("of keeps values and checks the shape") {
        Tensor.of(floatArrayOf(1f, 2f, 3f, 4f), 2, 2).toFloatArray() shouldBe floatArrayOf(1f, 2f, 3f, 4f)
        Tensor.of(doubleArrayOf(1.5, -2.0)).toDoubleArray() shouldBe doubleArrayOf(1.5, -2.0)
        Tensor.of(intArrayOf(7, -8)).toIntArray() shouldBe intArrayOf(7, -8)
        Tensor.of(longArrayOf(Long.MAX_VALUE)).toLongArray() shouldBe longArrayOf(Long.MAX_VALUE)
        shouldThrow<IllegalArgumentException> { Tensor.of(floatArrayOf(1f, 2f, 3f), 2, 2) }.message shouldContain "holds 4 elements but 3"
        shouldThrow<IllegalArgumentException> { Tensor.zeros(DType.Int8, -1) }.message shouldContain "negative"
    }

    test("every dtype stores and loads through element access") {
        for (dtype in DType.entries - DType.Bool) {
            val t = Tensor.zeros(dtype, 4)
            t.setDouble(1, 3.0)
            t.getDouble(1) shouldBe 3.0
            t.setLong(2, 5)
            t.getLong(2) shouldBe 5
        }
        val u8 = Tensor.zeros(DType.UInt8, 1)
        u8.setLong(0, 255)
        u8.getLong(0) shouldBe 255
        u8.setLong(0, 256)
        u8.getLong(0) shouldBe 0
        val i8 = Tensor.zeros(DType.Int8, 1)
        i8.setLong(0, 200)
        i8.getLong(0) shouldBe -56
        shouldThrow<IndexOutOfBoundsException> { u8.getDouble(1) }
    }

    test("the dtypes of issue 22: unsigned 32/64-bit, Int16, Bool and FP8 element access") {
        val u32 = Tensor.fromLongs(DType.UInt32, longArrayOf(0xFFFF_FFFFL, -1L, 1L shl 32))
        u32.toLongArray().toList() shouldBe listOf(0xFFFF_FFFFL, 0xFFFF_FFFFL, 0L)
        u32.getDouble(0) shouldBe 4294967295.0
        val u64 = Tensor.zeros(DType.UInt64, 2)
        u64.setDouble(0, 18446744073709549568.0) // 2^64 - 2048, the largest double below 2^64
        u64.getDouble(0) shouldBe 18446744073709549568.0
        u64.getLong(0) shouldBe -2048L // the bits, as ULong.toLong()
        u64.setDouble(1, -1.0) // wraps modulo 2^64
        u64.getLong(1) shouldBe -1L
        val i16 = Tensor.of(shortArrayOf(-2, 32767))
        i16.dtype shouldBe DType.Int16
        i16.setLong(0, 32768)
        i16.getLong(0) shouldBe -32768L
        val b = Tensor.of(booleanArrayOf(true, false))
        b.dtype shouldBe DType.Bool
        b.byteSize shouldBe 2L
        b.setDouble(1, Double.NaN) // NaN is true, as bool(nan) in Python
        b.toBooleanArray().toList() shouldBe listOf(true, true)
        b.setLong(0, 0)
        b.getLong(0) shouldBe 0L
        b.getDouble(1) shouldBe 1.0
        val e4 = Tensor.fromDoubles(DType.Float8E4M3, doubleArrayOf(500.0, -0.3, 1e-4))
        e4.toDoubleArray().toList() shouldBe listOf(448.0, -0.3125, 0.0)
        val e5 = Tensor.fromDoubles(DType.Float8E5M2, doubleArrayOf(1e6, 3.0))
        e5.toDoubleArray().toList() shouldBe listOf(57344.0, 3.0)
    }

    test("Float16 and BFloat16 round to nearest even") {
        val h = Tensor.zeros(DType.Float16, 3)
        h.setDouble(0, 1.0 + 1.0 / 2048) // exactly halfway between 1 and the next half: rounds to even (1.0)
        h.getDouble(0) shouldBe 1.0
        h.setDouble(1, 65504.0)
        h.getDouble(1) shouldBe 65504.0
        h.setDouble(2, 1e6)
        h.getDouble(2) shouldBe Double.POSITIVE_INFINITY
        val b = Tensor.zeros(DType.BFloat16, 3)
        b.setDouble(0, 1.0 + 1.0 / 256) // halfway: rounds to even (1.0)
        b.getDouble(0) shouldBe 1.0
        b.setDouble(1, 1.0 + 3.0 / 256) // halfway between 1+2/256 and 1+4/256: rounds to even (1+4/256)
        b.getDouble(1) shouldBe 1.0 + 4.0 / 256
        b.setDouble(2, Double.NaN)
        b.getDouble(2).isNaN() shouldBe true
        HalfPrecision.bfloat16ToFloat(HalfPrecision.floatToBFloat16(-2.5f)) shouldBe -2.5f
    }

    test("chunk along dim 0 gives views sharing memory") {
        val t = Tensor.of(FloatArray(12) { it.toFloat() }, 4, 3)
        val parts = t.chunk(2)
        parts[1].shape shouldContainExactly listOf(2, 3)
        parts[1].toFloatArray() shouldBe floatArrayOf(6f, 7f, 8f, 9f, 10f, 11f)
        parts[1].setFloat(0, 100f)
        t.getFloat(6) shouldBe 100f
    }

    test("chunk along dim 1 copies the right columns") {
        val t = Tensor.of(FloatArray(12) { it.toFloat() }, 2, 6)
        val parts = t.chunk(3, dim = 1)
        parts.map { it.toFloatArray().toList() } shouldContainExactly listOf(
            listOf(0f, 1f, 6f, 7f), listOf(2f, 3f, 8f, 9f), listOf(4f, 5f, 10f, 11f),
        )
        shouldThrow<IllegalArgumentException> { t.chunk(4, dim = 1) }.message shouldContain "not divisible by 4"
        shouldThrow<IllegalArgumentException> { t.chunk(2, dim = 2) }.message shouldContain "out of range"
    }

    test("concat is the inverse of chunk along any dim (property)") {
        checkAll(40, Arb.list(Arb.int(1..4), 1..4), Arb.int(1..3), Arb.enum<DType>()) { dims, parts, dtype ->
            val shape = dims.toIntArray()
            val d = dims.indices.last()
            shape[d] *= parts
            val n = shape.fold(1) { a, b -> a * b }
            val t = Tensor.zeros(dtype, *shape)
            for (i in 0 until n) t.setLong(i.toLong(), (i % 100).toLong())
            for (dim in shape.indices) {
                if (shape[dim] % parts != 0) continue
                Tensor.concat(t.chunk(parts, dim), dim).contentEquals(t) shouldBe true
            }
        }
    }

    test("concat checks dtype and shapes with a clear message") {
        val a = Tensor.zeros(DType.Float32, 2, 3)
        shouldThrow<IllegalArgumentException> { Tensor.concat(listOf(a, Tensor.zeros(DType.Float64, 2, 3))) }.message shouldContain "Float64"
        shouldThrow<IllegalArgumentException> { Tensor.concat(listOf(a, Tensor.zeros(DType.Float32, 2, 4)), 0) }.message shouldContain "must match"
        Tensor.concat(listOf(a, Tensor.zeros(DType.Float32, 2, 4)), 1).shape shouldContainExactly listOf(2, 7)
    }

    test("wrap views a caller's segment without copying or owning it") {
        Arena.ofConfined().use { arena ->
            val seg = arena.allocate(16)
            val t = Tensor.wrap(seg, DType.Int32, 2, 2)
            t.setLong(3, 9)
            seg.getAtIndex(java.lang.foreign.ValueLayout.JAVA_INT, 3) shouldBe 9
            t.close()
            seg.getAtIndex(java.lang.foreign.ValueLayout.JAVA_INT, 3) shouldBe 9 // still alive: not owned
            shouldThrow<IllegalArgumentException> { Tensor.wrap(seg, DType.Int32, 3) }.message shouldContain "slice"
        }
    }

    test("close frees owned memory at once and later access fails clearly") {
        val t = Tensor.zeros(DType.Float32, 4)
        t.close()
        t.isClosed shouldBe true
        t.isMemoryReleased shouldBe true
        shouldThrow<IllegalStateException> { t.segment }.message shouldContain "closed"
        shouldThrow<IllegalStateException> { t.getFloat(0) }.message shouldContain "closed"
        t.close()
        // A large tensor has an arena of its own: a segment kept past close fails too. (A small
        // tensor's block goes back to the pool, whose slab stays mapped: Tensor's KDoc says not to
        // keep segments past close; -Dtpcomm.memory.pool=false makes them fail, HostMemoryPoolSpec.)
        val big = Tensor.zeros(DType.Float32, (8 shl 20) / 4)
        val seg = big.segment
        big.close()
        shouldThrow<IllegalStateException> { seg.get(java.lang.foreign.ValueLayout.JAVA_FLOAT, 0) }
    }

    test("tensors allocated from a caller's arena belong to the arena") {
        val arena = Arena.ofConfined()
        val t = Tensor.zeros(DType.Float64, listOf(2), arena)
        t.close()
        arena.close()
        shouldThrow<IllegalStateException> { t.segment }
    }

    test("device tensors have an address but no host segment") {
        val t = Tensor.wrapDevice(Device.Cuda(0), 0x1000, DType.Float32, 8)
        t.address shouldBe 0x1000
        shouldThrow<IllegalStateException> { t.segment }.message shouldContain "no host segment"
        t.chunk(2)[1].address shouldBe 0x1000 + 16
        shouldThrow<IllegalArgumentException> { Tensor.wrapDevice(Device.Host, 1, DType.Float32, 1) }
    }

    test("view reshapes and copy is independent") {
        val t = Tensor.of(FloatArray(6) { it.toFloat() }, 2, 3)
        t.view(3, 2).shape shouldContainExactly listOf(3, 2)
        shouldThrow<IllegalArgumentException> { t.view(4) }
        val c = t.copy()
        c.setFloat(0, 9f)
        t.getFloat(0) shouldBe 0f
        Tensor.zeros(DType.Float32, 6).copyFrom(t).toFloatArray() shouldBe t.toFloatArray()
    }
})
