package dev.tpcomm

import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain
import java.lang.foreign.Arena

class TensorLifetimeSpec : FunSpec({
    test("close while an operation is in flight keeps the memory until the operation releases it") {
        val t = Tensor.of(floatArrayOf(1f, 2f, 3f, 4f))
        val seg = t.segment
        t.retain("allReduce")
        t.close()
        t.isClosed shouldBe true
        t.isMemoryReleased shouldBe false // native code may still write it
        seg.scope().isAlive shouldBe true
        t.segment.getAtIndex(java.lang.foreign.ValueLayout.JAVA_FLOAT, 3) shouldBe 4f
        t.release()
        t.isMemoryReleased shouldBe true // back to the pool (whose slab stays mapped)
        shouldThrow<IllegalStateException> { t.segment }
    }

    test("closing the parent of a view in flight defers the free to the view's release") {
        val parent = Tensor.zeros(DType.Float32, 8)
        val seg = parent.segment
        val (a, _) = parent.chunk(2)
        a.retain("send")
        parent.close()
        a.isClosed shouldBe true
        parent.isMemoryReleased shouldBe false
        seg.scope().isAlive shouldBe true
        a.release()
        parent.isMemoryReleased shouldBe true
    }

    test("a view of a closed parent is closed and cannot be retained") {
        val parent = Tensor.zeros(DType.Float32, 8)
        val (a, b) = parent.chunk(2)
        parent.close()
        a.isClosed shouldBe true
        b.isClosed shouldBe true
        shouldThrow<IllegalArgumentException> { a.retain("allReduce") }.message shouldBe
            "allReduce: the tensor was closed; pass an open tensor"
        shouldThrow<IllegalStateException> { a.segment }
    }

    test("close without anything in flight frees at once; arena tensors are only marked") {
        val t = Tensor.zeros(DType.Int32, 4)
        t.close()
        t.isMemoryReleased shouldBe true
        Arena.ofConfined().use { arena ->
            val u = Tensor.zeros(DType.Int32, listOf(4), arena)
            u.close()
            u.isClosed shouldBe true
            arena.scope().isAlive shouldBe true
        }
    }

    test("release without retain is a bug that is reported") {
        shouldThrow<IllegalStateException> { Tensor.zeros(DType.Int8, 1).release() }
    }

    test("shapes whose element or byte count overflows are refused, not wrapped to 0") {
        shouldThrow<IllegalArgumentException> { Tensor.zeros(DType.Float32, 65536, 65536, 65536, 65536) }
            .message shouldContain "more than"
        shouldThrow<IllegalArgumentException> { Tensor.zeros(DType.Float64, Int.MAX_VALUE, Int.MAX_VALUE, Int.MAX_VALUE) }
        shouldThrow<IllegalArgumentException> {
            Tensor.wrapDevice(Device.Cuda(0), 4096, DType.Float32, 65536, 65536, 65536, 65536)
        }
    }
})
