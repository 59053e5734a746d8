package dev.tpcomm.coroutines.local

import dev.tpcomm.DType
import dev.tpcomm.Tensor
import dev.tpcomm.coroutines.runLocalWorld
import io.kotest.assertions.throwables.shouldThrow
import io.kotest.core.spec.style.FunSpec
import io.kotest.matchers.collections.shouldContainExactly
import io.kotest.matchers.shouldBe
import io.kotest.matchers.string.shouldContain

/**
 * Issue 20 item 8: `chunk` along a dimension other than 0 cannot be a view (Tensor has no strides).
 * It returned a writable copy, so reducing it left the parent unchanged without a word. Now the
 * copy is read-only: the collective is refused, saying why, and reads still work.
 */
class ChunkCopySpec : FunSpec({
    test("all-reducing a column chunk of a weight (tensor-parallel sharding along dim 1) is refused instead of silently missing the weight") {
        val e = shouldThrow<IllegalArgumentException> {
            runLocalWorld(2) { comm ->
                val weight = Tensor.of(FloatArray(8) { it.toFloat() }, 2, 4)
                val shard = weight.chunk(2, dim = 1)[comm.rank]
                comm.allReduce(shard)
            }
        }
        e.message!! shouldContain "read-only"
        e.message!! shouldContain "chunk along a dimension other than 0"
    }

    test("a column chunk reads like the columns, refuses writes, and copy() gives a writable tensor") {
        val weight = Tensor.of(FloatArray(8) { it.toFloat() }, 2, 4)
        val (left, right) = weight.chunk(2, dim = 1)
        left.toFloatArray().toList() shouldContainExactly listOf(0f, 1f, 4f, 5f)
        right.toFloatArray().toList() shouldContainExactly listOf(2f, 3f, 6f, 7f)
        shouldThrow<RuntimeException> { left.setFloat(0, 9f) }.message!!.lowercase() shouldContain "read-only"
        val mine = left.copy().also { it.setFloat(0, 9f) }
        mine.getFloat(0) shouldBe 9f
        weight.getFloat(0) shouldBe 0f
        // Row chunks (dim 0) stay writable views of the weight.
        weight.chunk(2, dim = 0)[0].setFloat(0, 5f)
        weight.getFloat(0) shouldBe 5f
        left.close()
        right.close()
    }
})
