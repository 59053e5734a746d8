package dev.tpcomm

import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainExactly
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.lang.ref.WeakReference
import java.nio.ByteBuffer
import java.nio.ByteOrder

class TensorViewsSpec : FunSpec({
    test("narrow along dimension 0 is a view of the same memory") {
        val t = Tensor.of(FloatArray(12) { it.toFloat() }, 4, 3)
        val rows = t.narrow(0, 1, 2)
        rows.shape shouldContainExactly listOf(2, 3)
        rows.address shouldBe t.address + 3 * 4
        rows.toFloatArray() shouldBe floatArrayOf(3f, 4f, 5f, 6f, 7f, 8f)
        rows.setFloat(0, 42f)
        t.getFloat(3) shouldBe 42f
        t.narrow(-2, 1, 0).numel shouldBe 0
        t.narrow(1, 0, 3).address shouldBe t.address // the whole dimension: the same bytes
        val row = Tensor.of(FloatArray(6) { it.toFloat() }, 1, 6)
        val cols = row.narrow(1, 2, 3) // only size-1 dimensions before dim 1: contiguous
        cols.address shouldBe row.address + 8
        cols.toFloatArray() shouldBe floatArrayOf(2f, 3f, 4f)
    }

    test("narrow refuses ranges out of the dimension and views that would not be contiguous") {
        val t = Tensor.zeros(DType.Float32, 4, 3)
        shouldThrow<IllegalArgumentException> { t.narrow(0, 3, 2) }.message shouldContain "start + length <= 4"
        shouldThrow<IllegalArgumentException> { t.narrow(0, -1, 1) }
        shouldThrow<IllegalArgumentException> { t.narrow(2, 0, 1) }.message shouldContain "out of range"
        shouldThrow<IllegalArgumentException> { t.narrow(1, 0, 2) }.message shouldBe
            "narrow along dimension 1 of a tensor of shape [4, 3] would not be contiguous, and Tensor has no strides; " +
            "narrow along dimension 0 (lay the tensor out with that dimension first), or copy the parts out with chunk(parts, 1)"
    }

    test("split into sizes makes consecutive views that cover the tensor") {
        val bucket = Tensor.zeros(DType.Float32, 10)
        val (a, b, c) = bucket.split(listOf(3, 0, 7))
        a.shape shouldContainExactly listOf(3)
        b.numel shouldBe 0
        c.address shouldBe bucket.address + 12
        a.fill(1.0); c.fill(2.0)
        bucket.toFloatArray() shouldBe floatArrayOf(1f, 1f, 1f, 2f, 2f, 2f, 2f, 2f, 2f, 2f)
        val m = Tensor.of(FloatArray(8) { it.toFloat() }, 4, 2)
        m.split(listOf(1, 3)).map { it.shape } shouldBe listOf(listOf(1, 2), listOf(3, 2))
        m.split(listOf(2), 1).single().shape shouldContainExactly listOf(4, 2)
        shouldThrow<IllegalArgumentException> { bucket.split(listOf(3, 3)) }.message shouldContain "add up to 6 but dimension 0 has size 10"
        shouldThrow<IllegalArgumentException> { bucket.split(listOf(11, -1)) }.message shouldContain "negative"
        shouldThrow<IllegalArgumentException> { m.split(listOf(1, 1), 1) }.message shouldContain "would not be contiguous"
    }

    test("narrow and split views share the parent's lifetime: closed with it, and an operation in flight defers the free") {
        val parent = Tensor.zeros(DType.Int64, 6)
        val (x, y) = parent.split(listOf(2, 4))
        val n = parent.narrow(0, 1, 2)
        y.retain("allReduce")
        parent.close()
        x.isClosed shouldBe true
        n.isClosed shouldBe true
        shouldThrow<IllegalArgumentException> { n.retain("send") }.message shouldBe "send: the tensor was closed; pass an open tensor"
        parent.isMemoryReleased shouldBe false
        y.release()
        parent.isMemoryReleased shouldBe true
        shouldThrow<IllegalStateException> { x.getLong(0) }
        shouldThrow<IllegalStateException> { parent.narrow(0, 0, 1) }
        shouldThrow<IllegalStateException> { parent.split(listOf(6)) }
    }

    test("narrow works on device tensors by offsetting the pointer") {
        val d = Tensor.wrapDevice(Device.Cuda(0), 4096, DType.Float64, 8, 2)
        d.narrow(0, 3, 2).address shouldBe 4096 + 3 * 2 * 8
        d.split(listOf(4, 4))[1].address shouldBe 4096 + 4 * 2 * 8
    }

    test("wrap of a direct ByteBuffer views its remaining bytes in native order, without a copy") {
        val buf = ByteBuffer.allocateDirect(32).order(ByteOrder.nativeOrder())
        buf.putFloat(8, 2.5f)
        buf.position(8).limit(24)
        val t = Tensor.wrap(buf, DType.Float32, 2, 2)
        t.shape shouldContainExactly listOf(2, 2)
        t.getFloat(0) shouldBe 2.5f
        t.setFloat(3, 7f)
        buf.getFloat(20) shouldBe 7f
        t.close()
        buf.getFloat(20) shouldBe 7f // close does not free the buffer
        shouldThrow<IllegalStateException> { t.getFloat(0) }
    }

    test("wrap refuses heap buffers and a wrong size, and keeps read-only buffers read-only") {
        shouldThrow<IllegalArgumentException> { Tensor.wrap(ByteBuffer.allocate(16), DType.Float32, 4) }.message shouldContain
            "ByteBuffer.allocateDirect"
        shouldThrow<IllegalArgumentException> { Tensor.wrap(ByteBuffer.allocateDirect(16), DType.Float32, 3) }.message shouldContain
            "has 16 bytes between its position and limit but Float32[3] needs 12"
        val ro = Tensor.wrap(ByteBuffer.allocateDirect(8).asReadOnlyBuffer(), DType.Int64, 1)
        ro.segment.isReadOnly shouldBe true
        ro.getLong(0) shouldBe 0L
    }

    test("a wrapped buffer stays reachable as long as the tensor (or a view of it)") {
        var buf: ByteBuffer? = ByteBuffer.allocateDirect(1 shl 20)
        val weak = WeakReference(buf)
        val view = Tensor.wrap(buf!!, DType.Int8, 1 shl 20).narrow(0, 10, 10)
        buf = null
        repeat(3) { System.gc(); Thread.sleep(20) }
        (weak.get() != null) shouldBe true
        view.setLong(0, 5)
        view.getLong(0) shouldBe 5
    }
})
